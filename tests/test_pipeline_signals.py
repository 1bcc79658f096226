"""Interrupting a real launch: SIGINT/SIGTERM stop cleanly with a loadable, resumable checkpoint."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from learner.checkpoint import load_policy, read_checkpoint
from pipeline.config import resolve
from pipeline.config.flags import parse_config
from pipeline.launch import run

REPO = Path(__file__).resolve().parents[1]
COMMON = [
    "--actors", "2", "--envs-per-actor", "16", "--rollout-len", "8", "--opponent", "straight",
    "--reward", "outcome", "--device", "cpu", "--set", "run.eval_episodes=0",
    "--set", "ppo.hidden_sizes=[16, 16]", "--set", "ppo.update_epochs=1",
    # Not about compiling (which an open-ended budget of 10^9 steps turns on) or actor processes
    # (tests/test_pipeline_actor_process.py).
    "--set", "run.compile_step=false", "--set", "run.compile_agents=false", "--actor-processes", "off",
]


class Launch:
    """``python -m pipeline.launch`` in a child process, its output collected by a thread."""

    def __init__(self, run_dir: Path, *extra: str):
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "pipeline.launch", *COMMON, "--total-steps", "1000000000",
               "--display", "plain", "--run-dir", str(run_dir), "--set", "run.log_interval_s=0.2",
               *extra]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"never saw {text!r}; output:\n{''.join(self.lines)}")
            time.sleep(0.05)

    def finish(self, timeout: float = 120.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code


@pytest.mark.parametrize(
    "sig",
    [pytest.param(signal.SIGINT, id="SIGINT"),
     pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.slow)],
)
def test_signal_stops_with_checkpoint_and_run_resumes(tmp_path, sig):
    run_dir = tmp_path / "run"
    launch = Launch(run_dir)
    launch.wait_for("updates 2")  # a couple of updates happened
    launch.proc.send_signal(sig)
    code = launch.finish()
    out = "".join(launch.lines)
    assert code == 0, out
    assert f"stopping: received {sig.name}" in out and "checkpoint:" in out
    latest = run_dir / "checkpoints" / "latest.pt"
    policy = load_policy(latest)
    state = read_checkpoint(latest)
    steps = state["extra"]["agent_steps"]
    assert policy.policy_version >= 2 and steps > 0
    # The saved count is what was trained on: committed chunks still in flight are not in it,
    # so the resume produces them again.
    consumed = re.search(r"samples: produced (\d+) = consumed (\d+)", out)
    assert consumed is not None and steps == int(consumed.group(2)), out
    # The run resumes from where it stopped and adds exactly the remaining budget.
    target = steps + 2 * 16 * 8
    config = resolve(parse_config([*COMMON, "--display", "none", "--total-steps", str(target),
                                   "--resume", str(run_dir), "--run-dir", str(tmp_path / "resumed")]), "cpu")
    result = run(config)
    assert result.exit_code == 0 and result.agent_steps == target
    assert result.ring.produced_chunks == 2
    assert read_checkpoint(result.checkpoint)["policy_version"] > state["policy_version"]


@pytest.mark.slow
def test_second_interrupt_exits_at_once_and_checkpoint_stays_loadable(tmp_path):
    run_dir = tmp_path / "run"
    launch = Launch(run_dir, "--set", "run.checkpoint_interval_s=0.3")
    launch.wait_for("updates 3")
    launch.proc.send_signal(signal.SIGINT)
    launch.proc.send_signal(signal.SIGINT)
    code = launch.finish()
    assert code in (0, 130), "".join(launch.lines)  # 0 if the first stop finished first
    latest = run_dir / "checkpoints" / "latest.pt"
    assert latest.is_file()
    assert load_policy(latest).policy_version >= 1


HOLD_LOCK_CHILD = """
import os, signal, sys, threading, time
from pipeline.launch import main
from pipeline.transport.ring import RolloutRing

commit, sent = RolloutRing.commit, []

def commit_holding_the_lock(self, slot, version):
    # The third commit takes the ring's lock on the main thread, and SIGTERM arrives meanwhile.
    if len(sent) == 0 and self.stats().produced_chunks == 2:
        assert threading.current_thread() is threading.main_thread()
        with self._lock:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)
    commit(self, slot, version)

RolloutRing.commit = commit_holding_the_lock
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigterm_while_the_main_thread_holds_the_ring_lock(tmp_path, mode):
    """The handler only flags the stop on the event loop, so a SIGTERM that lands while the
    main thread holds the ring's (non-reentrant) lock cannot deadlock: clean exit, checkpoint."""
    run_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-c", HOLD_LOCK_CHILD, *COMMON, "--total-steps", "1000000000",
           "--display", "plain", "--run-dir", str(run_dir), "--metrics-port", "-1",
           *(["--sync"] if mode == "sync" else [])]
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the run hung after SIGTERM (deadlock?): {exc.stdout}")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "stopping: received SIGTERM" in out, out
    assert load_policy(run_dir / "checkpoints" / "latest.pt").policy_version >= 0
    assert not (run_dir / ".lock").exists()


@pytest.mark.slow
def test_a_stop_is_honoured_inside_a_long_chunk(tmp_path):
    """Chunks of many long decision steps (time scale 20: 500 physics steps each) are given up
    between two decision steps when the run stops, instead of running to their end."""
    launch = Launch(tmp_path / "run", "--time-scale", "20", "--rollout-len", "512", "--sync")
    launch.wait_for("metrics: ")  # the run has started its first chunk about now
    time.sleep(1.0)
    launch.proc.send_signal(signal.SIGINT)
    code = launch.finish()
    out = "".join(launch.lines)
    assert code == 0, out
    summary = re.search(r"samples: produced (\d+) = consumed (\d+) \+ dropped (\d+)", out)
    assert summary is not None, out
    produced, consumed, dropped = map(int, summary.groups())
    assert consumed == 0 and dropped == produced > 0, out  # the chunk under way was dropped
