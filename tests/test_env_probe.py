"""A Gymnasium env tried in a process of its own before a run (``actors/workers/env_probe.py``):
an env that exits, segfaults or fails its first reset is one line naming it, and a launch
with it ends with exit 2 instead of taking the launcher with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import envs_for_workers
import pytest
from envs_for_workers import CounterEnv

from actors.workers.env_probe import check_env_in_child

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent

FAULTS = {
    "exits_when_made": "env E: it called sys.exit(0) while being made",
    "segfaults_when_made": "env E: its process ended (killed by SIGSEGV) while being made",
    "reset_raises": "env E: its reset raised RuntimeError: reset refused (seed 0)",
    "WrongShapeEnv": "env E: reset returned an observation of shape (3,), not the observation space's (2,)",
    "SegfaultOnResetEnv": "env E: its process ended (killed by SIGSEGV) while being reset",
}


@pytest.mark.parametrize("factory", sorted(FAULTS))
def test_a_faulty_env_is_one_line_naming_it(factory: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_env_in_child(getattr(envs_for_workers, factory), "E")
    assert str(caught.value) == FAULTS[factory]


def test_a_sound_env_passes() -> None:
    check_env_in_child(CounterEnv, "counter")


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["exits_when_made", "segfaults_when_made", "SegfaultOnResetEnv"])
def test_a_launch_with_a_faulty_env_is_bad_input(tmp_path: Path, factory: str) -> None:
    """Exit 2 and one line, with the worker count left to its default (the env is timed in the
    launcher then) and given (it is not)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS), os.environ.get("PYTHONPATH", "")]))
    for workers in ([], ["--workers-per-actor", "1"]):
        run_dir = tmp_path / f"run{len(workers)}"
        cmd = [sys.executable, "-m", "pipeline.launch", "--env", f"envs_for_workers:{factory}", *workers,
               "--actors", "1", "--envs-per-actor", "2", "--total-steps", "1000", "--display", "plain",
               "--metrics-port", "-1", "--run-dir", str(run_dir)]
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        expected = FAULTS[factory].replace("env E:", f"error: env envs_for_workers:{factory}:")
        assert (done.returncode, done.stdout, done.stderr) == (2, "", expected + "\n")
        assert not run_dir.exists()
