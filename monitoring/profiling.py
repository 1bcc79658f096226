"""Named timing scopes and ``--profile`` recording.

``span(name)`` marks one phase of an actor or the learner. It is a ``torch.profiler``
``record_function`` range (it appears in traces) and, on CUDA, an NVTX range (it appears in
Nsight Systems). Names start with ``actor:`` or ``learner:`` (``actor:0:rollout``,
``learner:update``) so that :mod:`monitoring.overlap` can tell the roles apart.

:class:`ProfileSession` is what ``--profile`` uses: it records a few learner iterations with
``torch.profiler`` (CPU, plus CUDA activities where CUDA is present), from every thread, writes
a Chrome/Perfetto trace JSON into the run directory, analyses it, writes the report next to it
and sets ``midrange_overlap_ratio``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import shutil
from pathlib import Path
from types import TracebackType

import torch
import torch.autograd.profiler as _autograd_profiler
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from core.files import atomic_path, write_text_atomic
from monitoring.facade import Metrics

log = logging.getLogger(__name__)

ROLE_PREFIXES = ("actor:", "learner:")
"""Span-name prefixes the overlap analysis assigns to roles."""


@functools.cache
def _cuda_available() -> bool:
    return torch.cuda.is_available()


class span:  # lower case: used like a function, ``with span("actor:0:step"):``
    """A named timing scope: profiler range (``record_function``) plus NVTX range on CUDA.

    Without a running ``torch.profiler`` session the profiler range is skipped (a
    ``record_function`` costs tens of microseconds even then), so a span costs well under a
    microsecond on CPU; the NVTX range is pushed whenever CUDA is initialised, so Nsight Systems
    sees every span.
    """

    __slots__ = ("_name", "_nvtx", "_rf")

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"span name must be a non-empty string, got {name!r}")
        self._name = name
        self._rf: record_function | None = None
        self._nvtx = _cuda_available() and torch.cuda.is_initialized()

    def __enter__(self) -> span:
        # Set by torch.profiler.profile for the whole process (all threads).
        if _autograd_profiler._is_profiler_enabled:
            self._rf = record_function(self._name)
            self._rf.__enter__()
        if self._nvtx:
            torch.cuda.nvtx.range_push(self._name)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._nvtx:
            torch.cuda.nvtx.range_pop()
        if self._rf is not None:
            self._rf.__exit__(exc_type, exc, tb)
            self._rf = None


def profiler_activities() -> list[ProfilerActivity]:
    """CPU always; CUDA kernels and copies too where CUDA is available."""
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    return activities


def _all_threads_config():
    # Actors run in other threads than the learner (worker threads on CPU hosts); without
    # profile_all_threads the profiler only sees the thread that started it.
    try:
        return torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    except (AttributeError, TypeError):  # older torch: only the starting thread is recorded
        log.warning("this torch cannot profile all threads; spans of other threads are missing")
        return None


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (``core.files``), creating its folder if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def _export_trace(prof: profile, path: Path) -> None:
    """``prof``'s Chrome trace into ``path``. The profiler writes ``path.tmp`` and renames it,
    and a write that fails there is only logged; here its partial file is removed and a trace
    that did not appear is an ``OSError`` (``no space left on device`` when the disk is all but
    full)."""
    partial = path.with_name(path.name + ".tmp")
    try:
        prof.export_chrome_trace(str(path))
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    if not path.is_file():
        full = shutil.disk_usage(path.parent).free < (1 << 20)
        code = errno.ENOSPC if full else errno.EIO
        raise OSError(code, os.strerror(code), str(path))


class ProfileSession:
    """Record ``iterations`` learner iterations after ``warmup`` ones, then write the trace.

    Construct it in the main thread (the profiler's one-off initialisation runs there), then
    call :meth:`step` once at the end of every learner iteration; recording starts with the
    first call after construction (``warmup`` iterations are skipped first), and after
    ``iterations`` recorded ones the trace is written to ``run_dir/trace_name``, the overlap
    report to ``run_dir/<trace stem>.overlap.json``, and ``metrics.set_overlap_ratio`` is set.
    :meth:`close` finishes early (e.g. the run ended) and is idempotent.

    Args:
        run_dir: the run directory.
        iterations: learner iterations to record (>= 1).
        warmup: learner iterations to let pass before recording (>= 0).
        metrics: facade that receives the overlap ratio (optional).
        trace_name: file name of the trace inside ``run_dir``.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        iterations: int = 5,
        warmup: int = 1,
        metrics: Metrics | None = None,
        trace_name: str = "trace.json",
    ) -> None:
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
        if not trace_name.endswith(".json") or "/" in trace_name:
            raise ValueError(f"trace_name must be a plain file name ending in .json, got {trace_name!r}")
        self.run_dir = Path(run_dir)
        self.trace_path = self.run_dir / trace_name
        self.report_path = self.run_dir / (trace_name[: -len(".json")] + ".overlap.json")
        self.iterations = iterations
        self.warmup = warmup
        self.metrics = metrics
        self.report: dict | None = None
        self._seen = 0
        self._recorded = 0
        self._profiler: profile | None = None
        self._done = False
        if warmup == 0:
            self._start()
        else:
            # Kineto must first start in the thread that registers its client; a profiler first
            # started from a worker thread (the learner's) fails with "External init callback
            # must run in same thread as registerClient". An empty session here does the
            # one-off initialisation in the constructing thread.
            with profile(activities=profiler_activities()):
                pass

    @property
    def recording(self) -> bool:
        """True while the profiler records."""
        return self._profiler is not None

    @property
    def done(self) -> bool:
        """True once the trace is written (or the session was closed)."""
        return self._done

    def _start(self) -> None:
        config = _all_threads_config()
        kwargs = {"experimental_config": config} if config is not None else {}
        self._profiler = profile(activities=profiler_activities(), record_shapes=False, **kwargs)
        self._profiler.__enter__()
        log.info("profiling %d learner iterations", self.iterations)

    def step(self) -> None:
        """Mark the end of one learner iteration."""
        if self._done:
            return
        self._seen += 1
        if self._profiler is None:
            if self._seen >= self.warmup:
                self._start()
            return
        self._recorded += 1
        if self._recorded >= self.iterations:
            self._finish()

    def close(self) -> None:
        """Stop recording and write what was recorded (nothing when recording never began)."""
        if not self._done:
            if self._profiler is not None:
                self._finish()
            self._done = True

    def _finish(self) -> None:
        from monitoring.overlap import analyze_trace  # local: keeps span() imports light

        prof, self._profiler = self._profiler, None
        assert prof is not None, "_finish() runs only while recording"
        self._done = True
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # GPU activity of the recorded iterations must be complete
        prof.__exit__(None, None, None)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.trace_path) as tmp:  # the profiler writes the trace by name
            _export_trace(prof, tmp)
        report = analyze_trace(json.loads(self.trace_path.read_text()))
        self.report = report.to_dict()
        atomic_write_text(self.report_path, json.dumps(self.report, indent=2) + "\n")
        if self.metrics is not None:
            self.metrics.set_overlap_ratio(report.overlap_fraction)
        log.info("wrote %s (actor/learner overlap %.1f %% of wall time)", self.trace_path,
                 100 * report.overlap_fraction)

    def __enter__(self) -> ProfileSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
