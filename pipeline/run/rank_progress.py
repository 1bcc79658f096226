"""A rank's progress in a job of several ranks (:mod:`pipeline.run.ranks`): the job's agent-steps,
rank 0's files."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from learner.checkpoint import save_checkpoint
from monitoring import Metrics
from pipeline.run.display import Display
from pipeline.run.hooks import UpdateReport
from pipeline.run.parts import RunParts
from pipeline.run.progress import RunProgress
from pipeline.run.progress_log import ProgressLog
from pipeline.run.ranks import Job


class UnwrittenProgressLog(ProgressLog):
    """``progress.csv`` as a rank other than 0 sees it: rank 0 alone reads, trims and appends to
    it (and writes the TensorBoard events)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "progress.csv"
        self.dropped_rows = 0
        self._tb = None

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Write nothing (rank 0 writes the job's rows)."""


class JobProgress(RunProgress):
    """A rank's progress in a job of several ranks: its agent-steps are the job's (what the
    display, checkpoints and a resume count), and only rank 0 appends to ``progress.csv``."""

    def __init__(self, job: Job, parts: RunParts, metrics: Metrics, display: Display,
                 log: logging.Logger, run_dir: Path, agent_steps_before: int, mode: str) -> None:
        self.job = job
        super().__init__(parts, metrics, display, log, run_dir, agent_steps_before, mode)

    def _open_progress_log(self, agent_steps_before: int) -> ProgressLog:
        """Rank 0's ``progress.csv``; the other ranks' write nothing."""
        if self.job.rank:
            return UnwrittenProgressLog(self.run_dir)
        return super()._open_progress_log(agent_steps_before)

    @property
    def agent_steps(self) -> int:
        """Agent-steps the whole job trained on, a resumed run's earlier part included."""
        return self.steps_before + self.job.trained_samples

    def on_update(self, report: UpdateReport) -> None:
        """Count the job's samples of the update (every rank's batch), then as a single run."""
        self.job.trained_samples += self.job.agreed_samples
        super().on_update(report)

    def save_checkpoint(self) -> Path:
        """Rank 0 writes the job's checkpoint (and the league's state); every other rank checks
        its learner the same way (so all fail alike) and writes nothing."""
        if self.job.rank == 0:
            return super().save_checkpoint()
        path = save_checkpoint(self.run_dir / "checkpoints", self.parts.learner)  # checks, no write
        self.checkpoint_path = path
        self._last_checkpoint_t = time.perf_counter()
        return path


def make_progress(job: Job, parts: RunParts, metrics: Metrics, display: Display, log: logging.Logger,
                  run_dir: Path, agent_steps_before: int, mode: str) -> RunProgress:
    """The run's :class:`RunProgress`; a :class:`JobProgress` in a job of several ranks."""
    if job.distributed:
        return JobProgress(job, parts, metrics, display, log, run_dir, agent_steps_before, mode)
    return RunProgress(parts, metrics, display, log, run_dir, agent_steps_before, mode)
