"""What the loops report: one committed chunk, one update, and the hooks that receive them
(:class:`RunHooks`; progress, metrics and checkpoints live behind it, :mod:`pipeline.run.progress`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class ChunkOutcome:
    """Host-side facts about one committed chunk (read at the chunk boundary)."""

    actor_id: int
    samples: int
    """Agent-steps in the chunk."""
    physics_steps: int
    """Physics env-steps in the chunk."""
    wins: int
    draws: int
    losses: int
    lengths: torch.Tensor
    """Lengths of the episodes that ended in the chunk (decision steps)."""
    slot_wait_s: float
    """Seconds the actor waited for a FREE slot."""
    returns: torch.Tensor | None = None
    """Returns of the episodes that ended in the chunk (Gymnasium envs; the sim reports
    outcomes instead)."""


@dataclass(frozen=True)
class UpdateReport:
    """What one learner update consumed and produced."""

    samples: int
    lags: list[int]
    """Policy lag of each chunk trained on."""
    policy_version: int
    """The version the update produced (and published)."""
    stats: dict[str, float]
    """The PPO update's statistics (losses, entropy, KL, ...)."""


class RunHooks(Protocol):
    """What the loops tell the rest of the run (``pipeline.run.progress.RunProgress``)."""

    def on_chunk(self, outcome: ChunkOutcome) -> None:
        """A chunk was committed READY."""

    def on_update(self, report: UpdateReport) -> None:
        """An update finished (called on the learner's thread, after publishing)."""

    def on_busy(self, role: str, start: float, end: float) -> None:
        """``role`` (``actor`` or ``learner``) worked from ``start`` to ``end`` (perf_counter)."""

    def on_actor_failure(self, actor_id: int, exc: BaseException, dropped_chunk: bool) -> None:
        """An actor raised; raise ``RunFailed`` to stop the run instead of restarting it."""

    def on_interrupted_chunk(self) -> None:
        """A chunk was given up half-way because the run stops (its slot was aborted)."""
