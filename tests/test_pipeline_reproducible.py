"""Two ``--sync`` runs from one ``config.toml`` end with identical checkpoints, whatever the
timing between the event loop and the worker thread; a resume of such a run continues
identically."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actors.sim_actor import SimActor
from learner.checkpoint import read_checkpoint
from pipeline.launch import main
from pipeline.run.progress import RunProgress

ARGV = [
    "--sync", "--actors", "2", "--envs-per-actor", "2", "--rollout-len", "4",
    "--opponent", "random", "--reward", "outcome", "--device", "cpu", "--display", "none",
    "--set", "run.eval_episodes=0", "--set", "ppo.hidden_sizes=[8]", "--set", "ppo.update_epochs=1",
]
CHUNKS = 16
STEPS = CHUNKS * 2 * 4


def train(run_dir: Path, *argv: str) -> dict[str, Any]:
    """Run ``argv`` to the end in ``run_dir``, from global random states as a fresh process
    would have them (drawn from the clock); its final checkpoint."""
    entropy = time.time_ns()
    torch.manual_seed(entropy)
    np.random.seed(entropy % (1 << 32))  # noqa: NPY002 - the global generator the run must seed
    random.seed(entropy)
    assert main([*argv, "--run-dir", str(run_dir)]) == 0
    return read_checkpoint(run_dir / "checkpoints" / "latest.pt")


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a nested checkpoint by dotted path (tensors, numbers, strings)."""
    if isinstance(tree, dict):
        items: Any = tree.items()
    elif isinstance(tree, (list, tuple)):
        items = enumerate(tree)
    else:
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(flatten(v, f"{prefix}{k}."))
    return out


def assert_same_checkpoint(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Model, optimizer, shuffle and global RNG states (torch, numpy, Python, CUDA), version."""
    keys = ("model", "optimizer", "shuffle_rng", "rng", "policy_version")
    flat_a = flatten({k: a[k] for k in keys})
    flat_b = flatten({k: b[k] for k in keys})
    assert flat_a.keys() == flat_b.keys()
    for k, va in flat_a.items():
        vb = flat_b[k]
        if isinstance(va, torch.Tensor):
            assert torch.equal(va, vb), k
        else:
            assert va == vb, k
    assert a["extra"]["agent_steps"] == b["extra"]["agent_steps"]
    assert a["extra"]["updates"] == b["extra"]["updates"]


def plant_loop_delay(monkeypatch: pytest.MonkeyPatch, role: str, seconds: float) -> None:
    """Hold the event loop for ``seconds`` after every piece of ``role``'s work (the scheduler
    reports it through the run's ``on_busy`` hook, on the loop's thread), while the worker
    thread goes on with whatever is queued."""
    original = RunProgress.on_busy

    def on_busy(self: RunProgress, busy_role: str, start: float, end: float) -> None:
        if busy_role == role:
            time.sleep(seconds)
        original(self, busy_role, start, end)

    monkeypatch.setattr(RunProgress, "on_busy", on_busy)


def plant_slow_actor(monkeypatch: pytest.MonkeyPatch, actor_id: int, seconds: float) -> None:
    """Make ``actor_id``'s chunks take ``seconds`` longer on the worker thread."""
    original = SimActor.rollout

    def rollout(self: SimActor, slot: Any, should_stop: Any = None) -> None:
        if self.actor_id == actor_id:
            time.sleep(seconds)
        original(self, slot, should_stop)

    monkeypatch.setattr(SimActor, "rollout", rollout)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One sync run with no timing planted: its directory and final checkpoint."""
    run_dir = tmp_path_factory.mktemp("repro") / "first"
    return run_dir, train(run_dir, *ARGV, "--total-steps", str(STEPS), "--seed", "3")


@pytest.mark.parametrize("timing", ["loop waits after actors", "loop waits after learner",
                                    "actor 0 is slow", "actor 1 is slow"])
def test_sync_runs_from_one_config_are_identical_whatever_the_timing(tmp_path, monkeypatch, first_run, timing):
    run_dir, first = first_run
    config = run_dir / "config.toml"
    if timing == "loop waits after actors":
        plant_loop_delay(monkeypatch, "actor", 0.02)
    elif timing == "loop waits after learner":
        plant_loop_delay(monkeypatch, "learner", 0.02)
    else:
        plant_slow_actor(monkeypatch, int(timing.split()[1]), 0.02)
    again = train(tmp_path / "again", "--config", str(config))
    assert_same_checkpoint(first, again)


def test_resumes_of_a_sync_run_continue_identically(tmp_path, monkeypatch, first_run):
    run_dir, _ = first_run
    argv = [*ARGV, "--seed", "3", "--total-steps", str(2 * STEPS), "--resume", str(run_dir)]
    once = train(tmp_path / "once", *argv)
    plant_loop_delay(monkeypatch, "actor", 0.02)
    twice = train(tmp_path / "twice", *argv)
    assert once["extra"]["agent_steps"] == 2 * STEPS
    assert_same_checkpoint(once, twice)
