"""The metrics facade: the only monitoring object hot loops touch.

Every update is a few Python additions under a lock, or, for tensors, a few device kernels that
accumulate on the tensor's own device and stream. Nothing here reads a device value back to the
host and nothing here imports ``prometheus_client``: the exporter's collector
(``monitoring.collector``) reads :meth:`Metrics.snapshot` when Prometheus scrapes.

``Metrics(enabled=False)`` replaces every update method by a no-op on the instance, so a run
without metrics pays one attribute lookup and an empty call per update.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from monitoring.checks import check_int, check_label, check_seconds
from monitoring.histograms import (
    EPISODE_LENGTH_BUCKETS,
    POLICY_LAG_BUCKETS,
    WAIT_BUCKETS_S,
    DeviceHistogram,
    HistogramSnapshot,
    read_device,
    stream_key,
)

Count = int | torch.Tensor
"""A count given as a Python int or as a 0-dim (or one-element) integer/bool tensor."""

COPY_DIRECTIONS = ("h2d", "d2h")
"""Directions accepted by :meth:`Metrics.add_copy_bytes`: host to device, device to host."""

OUTCOMES = ("win", "draw", "loss")
"""Episode outcomes, from the learning side's point of view."""

class RingLike(Protocol):
    """What :meth:`Metrics.watch_ring` needs: ``stats()`` returning ``pipeline.transport.ring.RingStats``
    (or any object with its fields)."""

    def stats(self) -> Any:
        """Current slot and sample counters."""


@dataclass
class _EpisodeCounts:
    host: list[int] = field(default_factory=lambda: [0, 0, 0])
    device: dict[tuple[str, int], tuple[torch.Tensor, torch.cuda.Event | None]] = field(
        default_factory=dict
    )


@dataclass(frozen=True)
class MetricsSnapshot:
    """Everything the facade holds, read at one moment (host values only)."""

    agent_steps: dict[int, int]
    """Agent-steps (decisions of learning fighters) per actor."""
    physics_steps: dict[int, int]
    """Physics env-steps (environments × physics steps) per actor."""
    learner_samples: int
    """Samples (agent-steps) the learner consumed."""
    learner_updates: int
    """Learner updates (calls of :meth:`Metrics.observe_update`)."""
    policy_version: int | None
    """Latest published policy version (None before the first update)."""
    update_stats: dict[str, float]
    """Latest learner statistics (loss terms, KL, clip fraction, ...)."""
    policy_lag: HistogramSnapshot
    """Policy lag of consumed chunks, in versions."""
    slot_wait: dict[int, HistogramSnapshot]
    """Actor wait for a free ring slot, seconds, per actor."""
    batch_wait: HistogramSnapshot
    """Learner wait for a ready batch, seconds."""
    dropped_chunks: dict[str, int]
    """Dropped chunks by reason."""
    copy_bytes: dict[str, int]
    """Bytes copied by direction (``h2d``, ``d2h``)."""
    episodes: dict[tuple[int, str, str], int]
    """Finished episodes by (actor, opponent, outcome)."""
    episode_length: dict[str, HistogramSnapshot]
    """Episode lengths in decision steps, per opponent."""
    overlap_ratio: float | None
    """Fraction of wall time in which actor and learner work overlapped (None: not measured)."""
    ring: Any | None
    """``ring.stats()`` of the watched ring, or None."""
    env_worker_restarts: dict[str, int] = field(default_factory=dict)
    league_ratings: dict[str, float] = field(default_factory=dict)
    league_games: dict[tuple[str, str], int] = field(default_factory=dict)
    """Env worker processes restarted, by reason (``died``, ``timeout``)."""


def _noop(*_args: Any, **_kwargs: Any) -> None:
    return None


class Metrics:
    """Counters, gauges and histograms of one training process, cheap to update from hot loops.

    Args:
        enabled: False turns every update method into a no-op (and :meth:`snapshot` into an
            empty snapshot).
    """

    _UPDATE_METHODS = (
        "add_actor_steps", "observe_slot_wait", "observe_batch_wait", "add_learner_samples",
        "observe_update", "observe_policy_lag", "add_dropped_chunks", "add_copy_bytes",
        "record_episodes", "watch_ring", "set_overlap_ratio", "add_env_worker_restart",
    )

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = bool(enabled)
        self._lock = threading.Lock()
        self._agent_steps: dict[int, int] = {}
        self._physics_steps: dict[int, int] = {}
        self._learner_samples = 0
        self._learner_updates = 0
        self._policy_version: int | None = None
        self._update_stats: dict[str, float | torch.Tensor] = {}
        self._stats_event: torch.cuda.Event | None = None
        self._policy_lag = DeviceHistogram(POLICY_LAG_BUCKETS)
        self._slot_wait: dict[int, DeviceHistogram] = {}
        self._batch_wait = DeviceHistogram(WAIT_BUCKETS_S)
        self._dropped: dict[str, int] = {}
        self._copy_bytes = dict.fromkeys(COPY_DIRECTIONS, 0)
        self._episodes: dict[tuple[int, str], _EpisodeCounts] = {}
        self._episode_length: dict[str, DeviceHistogram] = {}
        self._overlap_ratio: float | None = None
        self._ring: RingLike | None = None
        self._env_worker_restarts: dict[str, int] = {}
        self._league_ratings: dict[str, float] = {}
        self._league_games: dict[tuple[str, str], int] = {}
        if not self.enabled:
            for name in self._UPDATE_METHODS:
                setattr(self, name, _noop)

    # ---- actors -------------------------------------------------------------------------
    def add_actor_steps(self, actor: int, agent_steps: int, physics_steps: int) -> None:
        """Count one chunk of an actor: agent-steps (decisions × learning fighters) and physics
        env-steps (environments × physics steps)."""
        actor = check_int("actor", actor)
        agent_steps = check_int("agent_steps", agent_steps)
        physics_steps = check_int("physics_steps", physics_steps)
        with self._lock:
            self._agent_steps[actor] = self._agent_steps.get(actor, 0) + agent_steps
            self._physics_steps[actor] = self._physics_steps.get(actor, 0) + physics_steps

    def observe_slot_wait(self, actor: int, seconds: float) -> None:
        """Record how long an actor waited for a free ring slot (backpressure)."""
        actor = check_int("actor", actor)
        seconds = check_seconds("seconds", seconds)
        hist = self._slot_wait.get(actor)
        if hist is None:
            with self._lock:
                hist = self._slot_wait.setdefault(actor, DeviceHistogram(WAIT_BUCKETS_S))
        hist.observe(seconds)

    def record_episodes(
        self,
        actor: int,
        opponent: str,
        wins: Count,
        draws: Count,
        losses: Count,
        lengths: torch.Tensor | Sequence[int],
        done_mask: torch.Tensor | None = None,
    ) -> None:
        """Count finished episodes of one actor against one opponent.

        Counts may be 0-dim tensors on the device and ``lengths`` a 1-D tensor: they are
        accumulated there, without a host sync, and read at scrape time. To avoid the sync of
        boolean indexing, pass the lengths of all environments with ``done_mask`` (same shape,
        bool) selecting the finished ones.
        """
        actor = check_int("actor", actor)
        opponent = check_label("opponent", opponent)
        counts = (wins, draws, losses)
        for name, value in zip(("wins", "draws", "losses"), counts, strict=True):
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise ValueError(f"{name} must be a 0-dim tensor or an int, got shape {tuple(value.shape)}")
                if value.is_floating_point() or value.is_complex():
                    raise ValueError(f"{name} must be an integer or bool tensor, got {value.dtype}")
            else:
                check_int(name, value)
        if isinstance(lengths, torch.Tensor):
            if lengths.dim() != 1:
                raise ValueError(f"lengths must be a 1-D tensor, got shape {tuple(lengths.shape)}")
            if done_mask is not None and (
                done_mask.shape != lengths.shape or done_mask.dtype != torch.bool
            ):
                raise ValueError(
                    f"done_mask must be a bool tensor shaped like lengths {tuple(lengths.shape)}, "
                    f"got {done_mask.dtype} {tuple(done_mask.shape)}"
                )
        else:
            if done_mask is not None:
                raise ValueError("done_mask needs lengths as a tensor")
            lengths = [check_int("lengths[i]", v) for v in lengths]

        with self._lock:
            acc = self._episodes.setdefault((actor, opponent), _EpisodeCounts())
            hist = self._episode_length.setdefault(opponent, DeviceHistogram(EPISODE_LENGTH_BUCKETS))
        tensors = [v for v in counts if isinstance(v, torch.Tensor)]
        if any(t.device != tensors[0].device for t in tensors):
            raise ValueError(
                "wins, draws and losses tensors must be on one device, got "
                + ", ".join(str(t.device) for t in tensors)
            )
        if tensors:
            device = tensors[0].device
            key = stream_key(device)
            slot = acc.device.get(key)
            if slot is None:
                event = torch.cuda.Event() if device.type == "cuda" else None
                slot = acc.device.setdefault(key, (torch.zeros(3, dtype=torch.int64, device=device), event))
            total, event = slot
            if len(tensors) == 3:  # the usual case: one kernel for all three counts
                total.add_(torch.stack([v.reshape(()).to(torch.int64) for v in tensors]))
            else:
                for i, value in enumerate(counts):
                    if isinstance(value, torch.Tensor):
                        total[i].add_(value.reshape(()).to(torch.int64))
            if event is not None:
                event.record(torch.cuda.current_stream(device))
        host = [v for v in counts if not isinstance(v, torch.Tensor)]
        if host:
            with self._lock:
                for i, value in enumerate(counts):
                    if not isinstance(value, torch.Tensor):
                        acc.host[i] += int(value)
        if isinstance(lengths, torch.Tensor):
            if lengths.numel():
                hist.observe_tensor(lengths, done_mask)
        else:
            hist.observe_sequence(lengths)

    # ---- learner ------------------------------------------------------------------------
    def observe_batch_wait(self, seconds: float) -> None:
        """Record how long the learner waited for a ready batch."""
        self._batch_wait.observe(check_seconds("seconds", seconds))

    def add_learner_samples(self, n: int) -> None:
        """Count samples (agent-steps) the learner consumed."""
        n = check_int("n", n)
        with self._lock:
            self._learner_samples += n

    def observe_update(self, stats: Mapping[str, float | torch.Tensor], policy_version: int) -> None:
        """Record one learner update: its statistics (latest value kept) and the new version.

        Values may be floats or 0-dim tensors; tensors are kept as they are and read at scrape
        time.
        """
        if not isinstance(stats, Mapping):
            raise ValueError(f"stats must be a mapping of name to number, got {type(stats).__name__}")
        policy_version = check_int("policy_version", policy_version)
        clean: dict[str, float | torch.Tensor] = {}
        for key, value in stats.items():
            if not isinstance(key, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", key):
                raise ValueError(f"stats keys must be snake_case names, got {key!r}")
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise ValueError(f"stats[{key!r}] must be a scalar, got shape {tuple(value.shape)}")
                clean[key] = value.detach()
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                clean[key] = float(value)
            else:
                raise ValueError(f"stats[{key!r}] must be a number, got {type(value).__name__} {value!r}")
        event = None
        cuda = [v for v in clean.values() if isinstance(v, torch.Tensor) and v.is_cuda]
        if cuda:
            # Scalars still being computed on the learner's stream: order the scrape after them.
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(cuda[0].device))
        with self._lock:
            self._learner_updates += 1
            self._policy_version = policy_version
            self._update_stats.update(clean)
            if event is not None:
                self._stats_event = event

    def observe_policy_lag(self, lags: Sequence[int] | torch.Tensor | int) -> None:
        """Record the policy lag (versions behind the learner) of consumed chunks."""
        if isinstance(lags, torch.Tensor):
            if lags.is_floating_point():
                raise ValueError(f"lags must be an integer tensor, got {lags.dtype}")
            if lags.numel():
                self._policy_lag.observe_tensor(lags)
        elif isinstance(lags, int):  # check_int refuses a bool
            self._policy_lag.observe(check_int("lag", lags))
        else:
            self._policy_lag.observe_sequence([check_int("lags[i]", v) for v in lags])

    def add_dropped_chunks(self, n: int, reason: str = "stale") -> None:
        """Count chunks the learner dropped (e.g. ``stale``: older than the policy-lag bound)."""
        n = check_int("n", n)
        reason = check_label("reason", reason)
        with self._lock:
            self._dropped[reason] = self._dropped.get(reason, 0) + n

    # ---- shared -------------------------------------------------------------------------
    def add_copy_bytes(self, direction: str, n: int) -> None:
        """Count bytes copied between host and device (``"h2d"`` or ``"d2h"``)."""
        if direction not in COPY_DIRECTIONS:
            raise ValueError(f"direction must be one of {COPY_DIRECTIONS}, got {direction!r}")
        n = check_int("n", n)
        with self._lock:
            self._copy_bytes[direction] += n

    def watch_ring(self, ring: RingLike) -> None:
        """Export ``ring.stats()`` (slots by state, reuses, samples) at every scrape."""
        if not callable(getattr(ring, "stats", None)):
            raise ValueError(f"ring must have a stats() method, got {type(ring).__name__}")
        self._ring = ring

    def set_overlap_ratio(self, r: float) -> None:
        """Set the measured fraction of wall time in which actor and learner work overlapped."""
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r <= 1.0:
            raise ValueError(f"overlap ratio must be a number in [0, 1], got {r!r}")
        self._overlap_ratio = float(r)

    def add_env_worker_restart(self, reason: str) -> None:
        """Count one restart of an env worker process (``died``: it ended; ``timeout``: it hung
        past its step timeout and was killed)."""
        reason = check_label("reason", reason)
        with self._lock:
            self._env_worker_restarts[reason] = self._env_worker_restarts.get(reason, 0) + 1

    def set_league(self, ratings: Mapping[str, float], games: Mapping[tuple[str, str], int]) -> None:
        """The league's current ratings (Elo scale, by player) and its total games (by opponent
        and the learner's outcome)."""
        with self._lock:
            self._league_ratings = {check_label("player", k): float(v) for k, v in ratings.items()}
            self._league_games = {(check_label("opponent", o), check_label("outcome", r)): int(n)
                                  for (o, r), n in games.items()}

    # ---- reading ------------------------------------------------------------------------
    def snapshot(self) -> MetricsSnapshot:
        """Read everything (device accumulators included); called at scrape time, not in hot loops."""
        with self._lock:
            agent_steps = dict(self._agent_steps)
            physics_steps = dict(self._physics_steps)
            samples, updates = self._learner_samples, self._learner_updates
            version = self._policy_version
            raw_stats = dict(self._update_stats)
            stats_event = self._stats_event
            slot_wait = dict(self._slot_wait)
            dropped = dict(self._dropped)
            copy_bytes = dict(self._copy_bytes)
            episodes_acc = {k: (list(v.host), list(v.device.values())) for k, v in self._episodes.items()}
            lengths = dict(self._episode_length)
            env_worker_restarts = dict(self._env_worker_restarts)
            league_ratings, league_games = dict(self._league_ratings), dict(self._league_games)
        update_stats = {
            k: float(read_device(v, stats_event if v.is_cuda else None)) if isinstance(v, torch.Tensor) else v
            for k, v in raw_stats.items()
        }
        episodes: dict[tuple[int, str, str], int] = {}
        for (actor, opponent), (host, device_parts) in episodes_acc.items():
            totals = host
            for tensor, event in device_parts:
                totals = [a + b for a, b in zip(totals, read_device(tensor, event).tolist(), strict=True)]
            for outcome, value in zip(OUTCOMES, totals, strict=True):
                episodes[(actor, opponent, outcome)] = int(value)
        ring_stats = self._ring.stats() if self._ring is not None else None
        return MetricsSnapshot(
            agent_steps=agent_steps,
            physics_steps=physics_steps,
            learner_samples=samples,
            learner_updates=updates,
            policy_version=version,
            update_stats=update_stats,
            policy_lag=self._policy_lag.snapshot(),
            slot_wait={a: h.snapshot() for a, h in slot_wait.items()},
            batch_wait=self._batch_wait.snapshot(),
            dropped_chunks=dropped,
            copy_bytes=copy_bytes,
            episodes=episodes,
            episode_length={o: h.snapshot() for o, h in lengths.items()},
            overlap_ratio=self._overlap_ratio,
            ring=ring_stats,
            env_worker_restarts=env_worker_restarts,
            league_ratings=league_ratings, league_games=league_games,
        )
