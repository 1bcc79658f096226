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
