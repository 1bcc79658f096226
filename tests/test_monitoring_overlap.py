"""Overlap analysis: a synthetic trace with known answers, and real CPU traces recorded here."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import pytest
import torch

from monitoring import Metrics, ProfileSession, span
from monitoring.overlap import analyze_trace, intersect, length, load_trace, main, union


def _x(name: str, ts: float, dur: float, cat: str = "user_annotation", tid: int = 1) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


SYNTHETIC = {
    "traceEvents": [
        _x("actor:0:rollout", 0, 100, tid=1),
        _x("actor:0:step", 10, 10, tid=1),  # nested: counted once
        _x("actor:1:rollout", 50, 100, tid=2),
        _x("learner:update", 120, 100, tid=3),
        _x("learner:copy", 230, 10, tid=3),
        _x("aten::mm", 0, 500, cat="cpu_op"),  # not a role span: ignored, also for wall time
        _x("actorless", 0, 900),  # no role prefix
        {"ph": "i", "name": "actor:0:marker", "ts": 5, "pid": 1, "tid": 1},  # instant: ignored
        _x("kernel_a", 0, 100, cat="kernel", tid=7),
        _x("kernel_b", 200, 60, cat="kernel", tid=7),
        _x("Memcpy HtoD", 90, 20, cat="gpu_memcpy", tid=8),  # 10 under kernel_a
        _x("Memcpy HtoD", 150, 10, cat="gpu_memcpy", tid=8),  # not hidden
        _x("Memcpy DtoH", 250, 20, cat="gpu_memcpy", tid=8),  # 10 under kernel_b
        _x("actor:0:rollout", 0, 100, cat="gpu_user_annotation", tid=7),
        _x("learner:update", 200, 60, cat="gpu_user_annotation", tid=7),
    ]
}


def test_interval_helpers() -> None:
    assert union([(5, 6), (0, 2), (1, 3), (3, 4), (7, 7)]) == [(0, 4), (5, 6)]
    assert intersect([(0, 4), (5, 6)], [(3, 5.5)]) == [(3, 4), (5, 5.5)]
    assert length([(0, 4), (5, 6)]) == 5


def test_synthetic_trace_known_answers() -> None:
    r = analyze_trace(SYNTHETIC)
    us = 1e-6
    assert r.span_count == 5
    assert r.wall_s == pytest.approx(270 * us)  # from 0 (first span/kernel) to 270 (last copy)
    assert r.busy_s == {"actor": pytest.approx(150 * us), "learner": pytest.approx(110 * us)}
    assert r.instance_busy_s == {
        "actor:0": pytest.approx(100 * us), "actor:1": pytest.approx(100 * us), "learner": pytest.approx(110 * us),
    }
    assert r.overlap_s == pytest.approx(30 * us)  # [120, 150]
    assert r.overlap_fraction == pytest.approx(30 / 270)
    assert r.busy_fraction["actor"] == pytest.approx(150 / 270)
    g = r.gpu
    assert g is not None
    assert g.kernel_s == pytest.approx(160 * us)
    assert g.copy_s == pytest.approx(50 * us)
    assert g.copy_hidden_s == pytest.approx(20 * us)
    assert g.copy_hidden_fraction == pytest.approx(0.4)
    assert g.busy_s == pytest.approx(190 * us)  # [0,110] + [150,160] + [200,270]
    assert g.busy_fraction == pytest.approx(190 / 270)
    assert g.role_busy_s == {"actor": pytest.approx(100 * us), "learner": pytest.approx(60 * us)}


def test_cli_on_synthetic_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(SYNTHETIC, fh)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "% hidden under compute" in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("RESULT ") and "overlap_fraction=0.111111" in last
    assert main([str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gpu"]["copy_hidden_fraction"] == pytest.approx(0.4)


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing.json")]) == 2
    assert "trace file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main([str(bad)]) == 2
    assert "is not a JSON trace" in capsys.readouterr().err
    with pytest.raises(ValueError, match="traceEvents"):
        analyze_trace({"traceEvents": 3})


def _work() -> None:
    a = torch.randn(64, 64)
    for _ in range(5):
        a = torch.tanh(a @ a)


def test_real_trace_of_two_concurrent_threads(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    metrics = Metrics()
    both_inside = threading.Barrier(2, timeout=30)

    def actor() -> None:
        with span("actor:0:rollout"):
            _work()
            both_inside.wait()  # the learner is inside its span at this moment too
            _work()

    session = ProfileSession(tmp_path, iterations=1, warmup=0, metrics=metrics)
    assert session.recording
    thread = threading.Thread(target=actor)
    thread.start()
    with span("learner:update"):
        _work()
        both_inside.wait()
        _work()
    thread.join()
    session.step()
    assert session.done and not session.recording
    report = analyze_trace(load_trace(session.trace_path))
    assert report.instance_busy_s.keys() == {"actor:0", "learner"}
    assert report.overlap_s > 0
    assert report.overlap_s <= min(report.busy_s.values()) <= report.wall_s
    assert report.gpu is None
    saved = json.loads(session.report_path.read_text())
    assert saved["overlap_fraction"] == pytest.approx(report.overlap_fraction)
    assert metrics.snapshot().overlap_ratio == pytest.approx(report.overlap_fraction)


def test_real_trace_of_alternating_phases_has_no_overlap(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    session = ProfileSession(tmp_path, iterations=2, warmup=1, trace_name="seq.json")
    assert not session.recording
    session.step()  # the warm-up iteration ends: recording starts
    assert session.recording
    for _ in range(2):
        with span("actor:0:rollout"):
            _work()
        with span("learner:update"):
            _work()
        session.step()
    assert session.done
    report = analyze_trace(load_trace(tmp_path / "seq.json"))
    assert report.span_count == 4
    assert report.busy_s["actor"] > 0 and report.busy_s["learner"] > 0
    # One thread runs one phase at a time; only the trace's rounding of timestamps may touch.
    assert report.overlap_s <= 1e-6


def test_close_before_recording_writes_nothing(tmp_path: Path) -> None:
    session = ProfileSession(tmp_path / "run", iterations=2, warmup=5)
    session.close()
    session.step()
    assert session.done and not (tmp_path / "run" / "trace.json").exists()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"iterations": 0}, "iterations must be an integer >= 1"), ({"warmup": -1}, "warmup must be"),
     ({"trace_name": "a/b.json"}, "plain file name")],
)
def test_profile_session_arguments(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProfileSession(tmp_path, **kwargs)


def test_span_rejects_empty_names() -> None:
    with pytest.raises(ValueError, match="span name must be a non-empty string"):
        span("")
