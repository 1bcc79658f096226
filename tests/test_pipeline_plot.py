"""RUN/progress.csv (pipeline.run.progress_log): rows appended across sessions, torn lines skipped,
TensorBoard scalars; python -m pipeline.plot draws several runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.plot import load_curves
from pipeline.plot import main as plot_main
from pipeline.run.progress_log import COLUMNS, ProgressLog, progress_rows, read_progress
from tests.full_disk import run_on_full_disk

ROOT = Path(__file__).resolve().parents[1]


def _snapshot(steps: int, wall: float, win: float, loss: float, episodes: int = 50, ret: float | None = None):
    return SimpleNamespace(elapsed_s=wall, agent_steps=steps, updates=steps // 100, agent_steps_per_s=1000.0,
                           policy_version=steps // 100, opponent="crank", episodes=episodes,
                           win_rate=win, draw_rate=1 - win - loss, loss_rate=loss, return_mean=ret)


def _write_run(run: Path, points: list[tuple[int, float, float]], session_split: int | None = None) -> None:
    run.mkdir(parents=True, exist_ok=True)
    log = ProgressLog(run)
    for k, (steps, wall, win) in enumerate(points):
        if session_split is not None and k == session_split:
            log.close()
            log = ProgressLog(run)  # a resumed run appends
        log.append(progress_rows(_snapshot(steps, wall, win, 0.1), {"entropy": 1.5, "learning_rate": 3e-4}))
    log.close()


def test_rows_append_across_sessions_and_wall_time_continues(tmp_path):
    run = tmp_path / "run"
    _write_run(run, [(1000, 1.0, 0.1), (2000, 2.0, 0.2), (3000, 0.5, 0.3), (4000, 1.5, 0.4)], session_split=2)
    text = (run / "progress.csv").read_text()
    assert text.splitlines()[0] == ",".join(COLUMNS)
    assert text.count("time_utc") == 1  # one header, however many sessions
    rows = read_progress(run / "progress.csv")
    assert [r["session"] for r in rows] == ["1", "1", "2", "2"]
    assert [float(r["wall_s"]) for r in rows] == [1.0, 2.0, 2.5, 3.5]
    assert [float(r["return_mean"]) for r in rows] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert rows[0]["entropy"] == "1.5" and rows[0]["rating"] == ""
    # A killed writer's torn last line is skipped.
    with open(run / "progress.csv", "a") as f:
        f.write("2026-11-23T00:00:00+00:00,2,9")
    assert len(read_progress(run / "progress.csv")) == 4


def test_several_opponents_and_gym_returns(tmp_path):
    rows = progress_rows(_snapshot(100, 1.0, 0, 0), {}, opponents={"crank": (0.5, 0.2, 0.3, 40), "shooter": (0, 0, 0, 0)})
    assert [r["opponent"] for r in rows] == ["crank", "shooter"]
    assert rows[0]["return_mean"] == pytest.approx(0.2) and "win_rate" not in rows[1]
    gym = progress_rows(_snapshot(100, 1.0, 0, 0, ret=123.0), {})
    assert gym[0]["return_mean"] == 123.0 and "win_rate" not in gym[0]


def test_tensorboard_event_files(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = ProgressLog(tmp_path, tensorboard=True)
    for steps, win in ((1000, 0.25), (2000, 0.5)):
        log.append(progress_rows(_snapshot(steps, steps / 1000, win, 0.1), {"entropy": 1.0}))
    log.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    wins = acc.Scalars("win_rate/crank")
    assert [(e.step, round(e.value, 3)) for e in wins] == [(1000, 0.25), (2000, 0.5)]
    assert "train/entropy" in acc.Tags()["scalars"]


def test_plot_overlays_runs_and_refuses_bad_input(tmp_path):
    pytest.importorskip("matplotlib")
    pil = pytest.importorskip("PIL.Image")
    a, b = tmp_path / "run-a", tmp_path / "run-b"
    _write_run(a, [(1000, 1.0, 0.1), (2000, 2.0, 0.3)])
    _write_run(b, [(1000, 1.5, 0.0), (2000, 3.0, 0.2), (3000, 4.5, 0.4)])
    assert load_curves(b)["crank"]["win_rate"] == pytest.approx([0.0, 0.2, 0.4])
    out = tmp_path / "curves.png"
    plot_main([str(a), str(b), "--png", str(out)])
    with pil.open(out) as img:
        assert img.format == "PNG" and img.size[0] >= 1000
    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run([sys.executable, "-m", "pipeline.plot", str(empty), "--png", str(tmp_path / "x.png")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no progress.csv" in done.stderr and "Traceback" not in done.stderr


def test_plot_keeps_only_the_opponents_asked_for(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run = tmp_path / "league-run"
    _write_run(run, [(1000, 1.0, 0.1), (2000, 2.0, 0.3)])
    plot_main([str(run), "--png", str(tmp_path / "one.png"), "--opponents", "crank"])
    assert "(1 runs, 1 curves)" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no curves to draw against shooter"):
        plot_main([str(run), "--png", str(tmp_path / "none.png"), "--opponents", "shooter"])


def test_full_disk_and_full_standard_output_name_what_failed(tmp_path):
    """A picture that cannot be written names its path; a standard output on /dev/full is named
    too (it said ``cannot write None``); one line, exit 1, no file left behind."""
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    _write_run(run, [(1000, 1.0, 0.1), (2000, 2.0, 0.2)])
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "pipeline.plot", str(run), "--png", str(tmp_path / "c.png")],
                           cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert p.returncode == 1
    assert p.stderr == "error: cannot write standard output: no space left on device\n"
    tiny = tmp_path / "tiny"
    p = run_on_full_disk(tiny, "pipeline.plot", [str(run), "--png", f"{tiny}/c.png"])
    assert p.returncode == 1
    assert p.stderr == f"error: cannot write {tiny}/c.png: no space left on device\n"
