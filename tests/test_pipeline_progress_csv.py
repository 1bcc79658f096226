"""What a run leaves to look at: RUN/progress.csv (appended by a resumed run), TensorBoard event
files with --tensorboard, and the end-of-run evaluation's replays in RUN/replays."""

from __future__ import annotations

import pytest
import torch

from pipeline.config import ConfigError, resolve
from pipeline.config.flags import parse_config
from pipeline.launch import run
from pipeline.run.progress_log import read_progress
from sim.replay.format import load_replay


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _config(tmp_path, *extra: str, steps: int = 512):
    argv = ["--actors", "2", "--envs-per-actor", "8", "--rollout-len", "8", "--total-steps", str(steps),
            "--opponent", "straight", "--reward", "outcome", "--device", "cpu", "--display", "none",
            "--run-dir", str(tmp_path / "run"), "--metrics-port", "-1", "--set", "ppo.hidden_sizes=[16, 16]",
            "--set", "ppo.update_epochs=1", "--set", "run.log_interval_s=0.05", "--actor-processes", "off",
            *extra]
    return resolve(parse_config(argv), "cpu")


def test_progress_csv_tensorboard_and_replays(tmp_path):
    pytest.importorskip("tensorboard")
    config = _config(tmp_path, "--tensorboard", "--set", "run.eval_episodes=2", "--set", "run.eval_replays=1")
    first = run(config)
    assert first.exit_code == 0
    rows = read_progress(first.run_dir / "progress.csv")
    assert rows and {r["session"] for r in rows} == {"1"}
    assert {r["opponent"] for r in rows} == {"straight"}
    last = rows[-1]
    assert int(last["agent_steps"]) == first.agent_steps == 512
    assert float(last["agent_steps_per_s"]) >= 0 and last["entropy"] and last["learning_rate"]
    steps = [int(r["agent_steps"]) for r in rows]
    assert steps == sorted(steps)
    assert list((first.run_dir / "tensorboard").glob("events.out.tfevents.*"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(first.run_dir / "tensorboard"))
    events.Reload()
    assert {"train/wall_s", "train/entropy"} <= set(events.Tags()["scalars"])
    assert [e.step for e in events.Scalars("train/wall_s")] == steps
    replays = sorted((first.run_dir / "replays").glob("*.replay"))
    assert [p.name for p in replays] == [f"policy-vs-{o}-000.replay" for o in ("crank", "pursuit", "random", "shooter", "straight")]
    assert load_replay(replays[0]).header["agents"]["red"].endswith(".pt")
    assert "replays:" in first.evaluation
    # A resumed run appends to the same file, its wall time continuing.
    resumed = run(_config(tmp_path, "--resume", str(first.run_dir), "--total-steps", "1024"))
    assert resumed.exit_code == 0
    more = read_progress(resumed.run_dir / "progress.csv")
    assert more[: len(rows)] == rows
    new = more[len(rows):]
    assert new and {r["session"] for r in new} == {"2"}
    assert float(new[0]["wall_s"]) >= float(rows[-1]["wall_s"])
    assert int(new[-1]["agent_steps"]) == 1024


def test_tensorboard_without_the_package_is_refused(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ConfigError, match=r"run\.tensorboard needs the tensorboard package"):
        _config(tmp_path, "--tensorboard")


def test_a_league_run_writes_a_row_per_opponent_with_the_rating(tmp_path):
    argv = ["--actors", "2", "--envs-per-actor", "8", "--rollout-len", "8", "--total-steps", str(24 * 64),
            "--opponent", "league", "--sync", "--device", "cpu", "--display", "none", "--metrics-port", "-1",
            "--run-dir", str(tmp_path / "run"), "--set", "run.eval_episodes=0", "--set", "run.log_interval_s=0.05",
            "--set", "ppo.hidden_sizes=[16, 16]", "--set", "ppo.update_epochs=1",
            "--set", "league.groups_per_actor=2", "--set", "league.hold_chunks=8",
            "--set", "league.snapshot_every=2", "--set", "league.max_snapshots=3"]
    result = run(resolve(parse_config(argv), "cpu"))
    assert result.exit_code == 0
    rows = read_progress(result.run_dir / "progress.csv")
    last_report = [r for r in rows if r["time_utc"] == rows[-1]["time_utc"] and r["agent_steps"] == rows[-1]["agent_steps"]]
    opponents = {r["opponent"] for r in last_report}
    assert len(opponents) >= 2 and opponents <= {"crank", "shooter", "random"} | {f"v{i}" for i in range(100)}
    for r in last_report:
        rates = [float(r[k]) for k in ("win_rate", "draw_rate", "loss_rate")]
        assert sum(rates) == pytest.approx(1.0, abs=1e-4)
        assert float(r["rating"]) > 0  # the learner's Elo, the same in every row of a report
    assert len({r["rating"] for r in last_report}) == 1


def test_rows_past_the_resumed_checkpoint_are_dropped_on_resume(tmp_path):
    # The rows a run appended after its last checkpoint describe training its resume does not
    # have; without dropping them the curve would jump back (a zigzag in pipeline.plot).
    from pipeline.run.progress_log import ProgressLog

    path = tmp_path / "progress.csv"
    header = "time_utc,session,wall_s,agent_steps,opponent\n"
    rows = ["t,1,1.0,100,straight\n", "t,1,2.0,200,straight\n", "t,1,3.0,300,straight\n",
            "t,1,4.0,400,straight\n"]
    path.write_text(header + "".join(rows) + "t,1,5.0,5")  # and a torn last line
    log = ProgressLog(tmp_path, agent_steps_before=200)
    assert log.dropped_rows == 2
    assert path.read_text() == header + "".join(rows[:2])
    assert log.wall_offset_s == 2.0 and log.session == 2
    untouched = path.stat().st_mtime_ns
    assert ProgressLog(tmp_path, agent_steps_before=200).dropped_rows == 0
    assert path.stat().st_mtime_ns == untouched  # nothing to drop: not rewritten
    assert ProgressLog(tmp_path).dropped_rows == 0  # no checkpoint count given: all kept


@pytest.mark.slow
def test_a_sigkilled_run_resumed_draws_no_zigzag(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "pipeline.launch", "--actors", "2", "--envs-per-actor", "8",
            "--rollout-len", "4", "--device", "cpu", "--opponent", "straight", "--reward", "outcome",
            "--display", "plain", "--metrics-port", "-1", "--set", "run.eval_episodes=0",
            "--set", "ppo.hidden_sizes=[8]", "--set", "ppo.update_epochs=1", "--actor-processes", "off",
            "--set", "run.log_interval_s=0.1", "--run-dir", str(run_dir)]
    first = subprocess.run([*argv, "--total-steps", "256"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    # Resumed with no checkpoint before the end, killed once it has reported training past it.
    lost = subprocess.Popen([*argv, "--total-steps", "100000000", "--resume", str(run_dir),
                             "--set", "run.checkpoint_interval_s=100000"], cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while max(int(r["agent_steps"]) for r in read_progress(run_dir / "progress.csv")) < 1024:
            assert lost.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        os.kill(lost.pid, signal.SIGKILL)
        lost.wait()
    again = subprocess.run([*argv, "--total-steps", "512", "--resume", str(run_dir)], cwd=repo,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "progress.csv: dropped " in again.stdout and "past the checkpoint's 256 agent-steps" in again.stdout
    steps = [int(r["agent_steps"]) for r in read_progress(run_dir / "progress.csv")]
    assert steps == sorted(steps) and steps[-1] == 512
