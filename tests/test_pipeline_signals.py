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

    def __init__(self, run_dir: Path, *extra: str, common: list[str] = COMMON):
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, "-m", "pipeline.launch", *common, "--total-steps", "1000000000",
               "--display", "plain", "--run-dir", str(run_dir), "--set", "run.log_interval_s=0.2",
               *extra]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     start_new_session=getattr(self, "own_group", False))
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 180.0) -> None:
        self.wait_for_line(re.compile(re.escape(text)), timeout)

    def wait_for_line(self, pattern: re.Pattern[str], timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(pattern.search(line) for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"never saw {pattern.pattern!r}; output:\n{''.join(self.lines)}")
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
    # 4096 decision steps a chunk: several seconds even on a fast machine. The signal goes once
    # a progress line shows episodes ended and no step trained yet: the first chunk is under way.
    launch = Launch(tmp_path / "run", "--time-scale", "20", "--rollout-len", "4096", "--sync")
    launch.wait_for_line(re.compile(r"steps 0/\d+ .* of [1-9]"))
    launch.proc.send_signal(signal.SIGINT)
    code = launch.finish()
    out = "".join(launch.lines)
    assert code == 0, out
    summary = re.search(r"samples: produced (\d+) = consumed (\d+) \+ dropped (\d+)", out)
    assert summary is not None, out
    produced, consumed, dropped = map(int, summary.groups())
    assert consumed == 0 and dropped == produced > 0, out  # the chunk under way was dropped


def _group_members(pgid: int) -> set[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    members = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.add(int(stat.parent.name))
    return members


def _wait_group_gone(pgid: int, timeout: float = 30.0) -> set[int]:
    """Wait (bounded) until nothing of the group runs; what still runs then."""
    deadline = time.monotonic() + timeout
    while (left := _group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


class GroupLaunch(Launch):
    """A launch in a process group of its own (``setsid``), as ``timeout``, ``systemctl stop``
    and Slurm signal it: the whole group at once."""

    def __init__(self, run_dir: Path, *extra: str, common: list[str] = COMMON):
        self.own_group = True
        super().__init__(run_dir, *extra, common=common)

    def signal_group(self, sig: signal.Signals) -> None:
        os.killpg(self.proc.pid, sig)


GYM_WORKERS = [
    "--env", "gym:CartPole-v1", "--workers-per-actor", "2", "--actors", "2", "--envs-per-actor", "4",
    "--rollout-len", "8", "--device", "cpu", "--set", "run.eval_episodes=0",
    "--set", "ppo.hidden_sizes=[16, 16]", "--set", "ppo.update_epochs=1",
]
"""What COMMON is for the sim, for CartPole in 2 worker processes per actor."""


def _own_blocks(pid: int) -> list[str]:
    """The launcher's env-worker blocks still in /dev/shm (named ``mrl<pid>_...``)."""
    shm = Path("/dev/shm")
    return sorted(p.name for p in shm.glob(f"mrl{pid}_*")) if shm.is_dir() else []


@pytest.mark.slow
def test_process_group_sigterm_with_actor_processes_is_a_clean_stop(tmp_path):
    """SIGTERM to the whole group reaches the 4 actor processes too: they leave the stop to the
    launcher, which stops them, saves a checkpoint and exits 0 with no failure counted."""
    run_dir = tmp_path / "run"
    launch = GroupLaunch(run_dir, "--actors", "4", "--actor-processes", "on", "--metrics-port", "-1")
    launch.wait_for("updates 2")
    assert len(_group_members(launch.proc.pid)) >= 5  # the launcher and its 4 actor processes
    launch.signal_group(signal.SIGTERM)
    code = launch.finish()
    out = "".join(launch.lines)
    assert code == 0, out
    assert "stopping: received SIGTERM" in out and "failed" not in out, out
    assert re.findall(r"failures (\d+)", out)[-1] == "0", out
    assert "failed" not in (run_dir / "run.log").read_text()
    assert load_policy(run_dir / "checkpoints" / "latest.pt").policy_version >= 2
    assert not _wait_group_gone(launch.proc.pid), "a child outlived the launcher"


@pytest.mark.slow
def test_process_group_sigterm_with_env_workers_restarts_none_and_leaves_no_block(tmp_path):
    run_dir = tmp_path / "run"
    launch = GroupLaunch(run_dir, "--metrics-port", "-1", common=GYM_WORKERS)
    launch.wait_for("updates 2")
    assert len(_own_blocks(launch.proc.pid)) == 4  # 2 actors × 2 workers, one block each
    # As `timeout` does it: the launcher, then its whole group (the launcher again): one stop.
    launch.proc.send_signal(signal.SIGTERM)
    launch.signal_group(signal.SIGTERM)
    code = launch.finish()
    out = "".join(launch.lines)
    assert code == 0, out
    assert "stopping: received SIGTERM" in out and "restarting" not in out and "failed" not in out, out
    assert load_policy(run_dir / "checkpoints" / "latest.pt").policy_version >= 2
    assert not _own_blocks(launch.proc.pid)
    assert not _wait_group_gone(launch.proc.pid), "a worker outlived the launcher"


@pytest.mark.slow
def test_second_group_signal_with_env_workers_unlinks_the_blocks(tmp_path):
    """Exit 130 skips the teardown: the blocks are unlinked on the way out, and the workers
    exit by themselves once the launcher is gone."""
    launch = GroupLaunch(tmp_path / "run", "--metrics-port", "-1", common=GYM_WORKERS)
    launch.wait_for("updates 2")
    assert _own_blocks(launch.proc.pid)
    launch.signal_group(signal.SIGTERM)
    time.sleep(1.0)  # later than SAME_SIGNAL_S: a second signal, not the first one repeated
    launch.signal_group(signal.SIGTERM)
    code = launch.finish()
    # 0 if the first stop finished first; -SIGTERM if the second came as the process ended,
    # its teardown done.
    assert code in (0, 130, -signal.SIGTERM), "".join(launch.lines)
    assert not _own_blocks(launch.proc.pid)
    assert not _wait_group_gone(launch.proc.pid), "a worker outlived the launcher"


@pytest.mark.slow
def test_an_env_in_a_crash_loop_stops_the_run_with_one_line(tmp_path):
    """An env whose worker segfaults every 30 steps never takes a healthy stretch: its pool
    gives up after its restarts, and the run stops (exit 1) with its summary."""
    tests = str(Path(__file__).resolve().parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), tests, os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pipeline.launch", "--env", "envs_for_workers:crash_loop_env",
           "--workers-per-actor", "1", "--actors", "1", "--envs-per-actor", "2", "--rollout-len", "8",
           "--total-steps", "1000000", "--device", "cpu", "--display", "plain", "--metrics-port", "-1",
           "--run-dir", str(tmp_path / "run"), "--set", "run.eval_episodes=0",
           "--set", "run.max_actor_failures=1"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out
    assert "WorkerCrashError: env worker 0" in errors[0] and "killed by SIGSEGV) 4 times" in errors[0], out
    assert "samples: produced" in out and "checkpoint:" in out and "Traceback" not in out, out


@pytest.mark.slow
def test_sigterm_during_the_start_stops_the_workers_and_unlinks_their_blocks(tmp_path):
    """Before the run loop handles signals, SIGTERM unwinds the start: one line, exit 143, the
    workers started so far stopped and their blocks unlinked."""
    tests = str(Path(__file__).resolve().parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), tests, os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pipeline.launch", "--env", "envs_for_workers:SlowResetInWorkerEnv",
           "--workers-per-actor", "2", "--actors", "1", "--envs-per-actor", "2", "--display", "plain",
           "--metrics-port", "-1", "--run-dir", str(tmp_path / "run")]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    while len(_own_blocks(proc.pid)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_own_blocks(proc.pid)) == 2, proc.communicate(timeout=60)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out, err) == (143, "", "error: received SIGTERM during the start; nothing was trained\n")
    assert not _own_blocks(proc.pid)
    assert not _wait_group_gone(proc.pid), "a worker outlived the launcher"
