"""``midrange_overlap_ratio`` is live in every run: each report exports the share of wall time so
far in which actor and learner work overlapped (host busy intervals)."""

from __future__ import annotations

import logging
import time

import pytest
import torch

from monitoring import Metrics
from pipeline.config import resolve
from pipeline.config.flags import parse_config
from pipeline.run.parts import build
from pipeline.run.progress import RunProgress


class _Silent:
    def update(self, progress): ...
    def message(self, text): ...
    def close(self): ...


def _run(tmp_path):
    """The metrics, parts and progress record of a small CPU run (not started)."""
    config = resolve(parse_config(["--actors", "1", "--envs-per-actor", "8", "--rollout-len", "4",
                                   "--display", "none", "--metrics-port", "-1",
                                   "--run-dir", str(tmp_path / "run")]), "cpu")
    metrics = Metrics()
    parts = build(config, metrics, tmp_path / "run")
    return metrics, parts, RunProgress(parts, metrics, _Silent(), logging.getLogger("t"), tmp_path, 0, "async")


def test_each_report_exports_the_overlap_so_far(tmp_path):
    metrics, _, progress = _run(tmp_path)
    assert metrics.snapshot().overlap_ratio is None
    progress.start_time = t0 = time.perf_counter() - 10.0  # a run 10 s old
    progress.on_busy("actor", t0, t0 + 2.0)
    progress.on_busy("learner", t0 + 1.0, t0 + 1.5)  # 0.5 s of overlap
    progress.on_busy("learner", t0 + 3.0, t0 + 4.0)  # alone
    progress.report()
    assert metrics.snapshot().overlap_ratio == pytest.approx(0.5 / 10.0, rel=0.05)

    class _Profiled:
        report = object()  # a --profile trace measured it: its figure stays

    metrics.set_overlap_ratio(0.123)
    progress.profile = _Profiled()
    progress.report()
    assert metrics.snapshot().overlap_ratio == 0.123


def test_on_a_cuda_device_the_host_intervals_are_not_exported_as_the_overlap(tmp_path):
    """On CUDA the host intervals time the enqueue of a chunk's kernels, not the kernels (one H200
    launch: 14 % from them, 69 % from the profiler's trace), so only a trace sets the gauge."""
    metrics, parts, progress = _run(tmp_path)
    assert progress.host_overlap_is_device_overlap
    parts.device = torch.device("cuda:0")  # what the report reads of a CUDA run; nothing here touches the device
    assert not progress.host_overlap_is_device_overlap
    progress.start_time = t0 = time.perf_counter() - 10.0
    progress.on_busy("actor", t0, t0 + 2.0)
    progress.on_busy("learner", t0 + 1.0, t0 + 1.5)
    progress.report()
    assert metrics.snapshot().overlap_ratio is None
