"""The Prometheus collector: turns a :class:`~monitoring.facade.Metrics` snapshot, the CUDA
allocator statistics and the pinned host allocator statistics into metric families, only when
Prometheus scrapes.

Every name starts with ``midrange_`` and uses base units (seconds, bytes); counters end in
``_total``. :data:`CATALOG` lists every family the collector can emit; ``describe()`` returns
it, so a registry knows all names before the first scrape (the dashboard test relies on this).

On a host without CUDA the CUDA allocator and pinned-memory series are still exported, with the
value 0 and ``device="none"``: panels read 0 instead of "No data" and every dashboard query
returns a series on any host.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.registry import Collector

from monitoring.facade import Metrics, MetricsSnapshot
from monitoring.histograms import HistogramSnapshot

PREFIX = "midrange_"


@dataclass(frozen=True)
class MetricSpec:
    """One metric family the collector exports."""

    name: str
    """Family name without the type suffix (``_total``, ``_bucket``, ``_info`` are added)."""
    kind: str
    """``counter``, ``gauge``, ``histogram`` or ``info``."""
    help: str
    """One-line description shown by Prometheus."""
    labels: tuple[str, ...] = ()
    """Label names."""

    def sample_names(self) -> tuple[str, ...]:
        """Names of the time series this family produces in the exposition."""
        if self.kind == "counter":
            return (f"{self.name}_total",)
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        if self.kind == "info":
            return (f"{self.name}_info",)
        return (self.name,)


# Learner statistics exported under their own names; other keys go to midrange_learner_stat.
LEARNER_GAUGES = {
    "approx_kl": "Approximate KL divergence between the behaviour and the updated policy.",
    "clip_fraction": "Fraction of samples whose PPO ratio was clipped.",
    "entropy": "Mean policy entropy, nats.",
    "explained_variance": "Explained variance of the value function on the batch.",
    "grad_norm": "Global gradient norm before clipping.",
    "learning_rate": "Optimizer learning rate.",
}

_S = MetricSpec
CATALOG: tuple[MetricSpec, ...] = (
    _S("midrange_actor_agent_steps", "counter", "Agent-steps (decisions of learning fighters) produced, per actor.", ("actor",)),
    _S("midrange_actor_physics_steps", "counter", "Physics env-steps (environments x physics steps) simulated, per actor.", ("actor",)),
    _S("midrange_actor_slot_wait_seconds", "histogram", "Time an actor waited for a free ring slot.", ("actor",)),
    _S("midrange_learner_samples", "counter", "Samples (agent-steps) consumed by the learner."),
    _S("midrange_learner_updates", "counter", "Learner updates."),
    _S("midrange_learner_batch_wait_seconds", "histogram", "Time the learner waited for a ready batch."),
    _S("midrange_policy_version", "gauge", "Latest published policy version."),
    _S("midrange_policy_lag_versions", "histogram", "Policy versions between the chunk's behaviour policy and the learner's."),
    _S("midrange_dropped_chunks", "counter", "Rollout chunks dropped by the learner, by reason.", ("reason",)),
    _S("midrange_copy_bytes", "counter", "Bytes copied between host and device, by direction.", ("direction",)),
    _S("midrange_ring_capacity_slots", "gauge", "Slots in the rollout ring."),
    _S("midrange_ring_slots", "gauge", "Ring slots by state.", ("state",)),
    _S("midrange_ring_slot_reuses", "counter", "Times a ring slot was reused for a new chunk."),
    _S("midrange_ring_produced_samples", "counter", "Samples written into the ring."),
    _S("midrange_ring_consumed_samples", "counter", "Samples the learner took from the ring."),
    _S("midrange_ring_dropped_samples", "counter", "Samples dropped from the ring."),
    _S("midrange_ring_dropped_chunks", "counter", "Chunks dropped from the ring."),
    _S("midrange_ring_in_flight_samples", "gauge", "Samples written but not yet consumed or dropped."),
    _S("midrange_episodes", "counter", "Finished episodes by outcome (learning side) and opponent.", ("actor", "opponent", "outcome")),
    _S("midrange_episode_length_steps", "histogram", "Episode length in decision steps.", ("opponent",)),
    _S("midrange_learner_loss", "gauge", "Latest loss terms of the learner, by term.", ("term",)),
    *(_S(f"midrange_learner_{k}", "gauge", h) for k, h in LEARNER_GAUGES.items()),
    _S("midrange_learner_stat", "gauge", "Other latest learner statistics, by name.", ("name",)),
    _S("midrange_overlap_ratio", "gauge", "Fraction of wall time in which actor and learner work ran at once (host busy intervals; a --profile trace's device figure once recorded)."),
    _S("midrange_env_worker_restarts", "counter", "Env worker processes restarted, by reason (died, timeout).", ("reason",)),
    _S("midrange_league_rating", "gauge", "Bradley-Terry rating (Elo scale) of each league player, the learner included.", ("player",)),
    _S("midrange_league_games", "counter", "League games of the learner, by opponent and the learner's outcome.", ("opponent", "outcome")),
    _S("midrange_cuda_memory_allocated_bytes", "gauge", "Bytes held by tensors in the CUDA caching allocator.", ("device",)),
    _S("midrange_cuda_memory_reserved_bytes", "gauge", "Bytes reserved from the driver by the CUDA caching allocator.", ("device",)),
    _S("midrange_cuda_memory_peak_allocated_bytes", "gauge", "Peak bytes held by tensors since start.", ("device",)),
    _S("midrange_cuda_allocations", "counter", "Allocation requests served by the CUDA caching allocator.", ("device",)),
    _S("midrange_cuda_segment_allocations", "counter", "cudaMalloc calls (new segments); flat in a steady state.", ("device",)),
    _S("midrange_cuda_alloc_retries", "counter", "Allocations that had to free cached blocks and retry.", ("device",)),
    _S("midrange_cuda_ooms", "counter", "Out-of-memory errors raised by the CUDA allocator.", ("device",)),
    _S("midrange_pinned_host_memory_bytes", "gauge", "Pinned host bytes held by the caching host allocator.", ("device",)),
    _S("midrange_pinned_host_allocations", "counter", "Pinned host blocks created by the caching host allocator.", ("device",)),
    _S("midrange_build", "info", "Versions of this build.", ("version", "torch", "python", "cuda", "rank")),
)
_BY_NAME = {spec.name: spec for spec in CATALOG}


def registered_sample_names() -> frozenset[str]:
    """Every time-series name the exporter can produce (dashboard expressions must use these)."""
    return frozenset(name for spec in CATALOG for name in spec.sample_names())


def _family(name: str):
    spec = _BY_NAME[name]
    labels = list(spec.labels)
    if spec.kind == "counter":
        return CounterMetricFamily(name, spec.help, labels=labels)
    if spec.kind == "gauge":
        return GaugeMetricFamily(name, spec.help, labels=labels)
    if spec.kind == "histogram":
        return HistogramMetricFamily(name, spec.help, labels=labels)
    return InfoMetricFamily(name, spec.help, labels=[])


def _histogram(family: HistogramMetricFamily, labels: list[str], snap: HistogramSnapshot) -> None:
    buckets = [(_le(b), c) for b, c in zip(snap.bounds, snap.cumulative, strict=False)]
    buckets.append(("+Inf", snap.cumulative[-1]))
    family.add_metric(labels, buckets, snap.sum)


def _le(bound: float) -> str:
    return repr(float(bound))


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("midrange-rl")
    except PackageNotFoundError:
        return "0.1.0+src"


class MetricsCollector(Collector):
    """Reads a :class:`Metrics` facade and the allocators at scrape time.

    Args:
        metrics: the facade to export.
        rank: the ``torch.distributed`` rank, exported as a label of ``midrange_build_info``.
    """

    def __init__(self, metrics: Metrics, rank: int = 0) -> None:
        self.metrics = metrics
        self.rank = rank
        self._build = {
            "version": _version(),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "cuda": torch.version.cuda or "none",
            "rank": str(rank),
        }

    def describe(self) -> Iterator:
        """All families, without samples (lets the registry check names without a scrape)."""
        for spec in CATALOG:
            yield _family(spec.name)

    def collect(self) -> Iterator:
        """Build every family from a fresh snapshot."""
        snap = self.metrics.snapshot()
        yield from self._facade_families(snap)
        yield from self._ring_families(snap.ring)
        yield from self._allocator_families()
        info = _family("midrange_build")
        info.add_metric([], self._build)
        yield info

    def _facade_families(self, snap: MetricsSnapshot) -> Iterator:
        fam = _family("midrange_actor_agent_steps")
        for actor, n in sorted(snap.agent_steps.items()):
            fam.add_metric([str(actor)], n)
        yield fam
        fam = _family("midrange_actor_physics_steps")
        for actor, n in sorted(snap.physics_steps.items()):
            fam.add_metric([str(actor)], n)
        yield fam
        fam = _family("midrange_actor_slot_wait_seconds")
        for actor, hist in sorted(snap.slot_wait.items()):
            _histogram(fam, [str(actor)], hist)
        yield fam
        fam = _family("midrange_learner_samples")
        fam.add_metric([], snap.learner_samples)
        yield fam
        fam = _family("midrange_learner_updates")
        fam.add_metric([], snap.learner_updates)
        yield fam
        fam = _family("midrange_learner_batch_wait_seconds")
        _histogram(fam, [], snap.batch_wait)
        yield fam
        if snap.policy_version is not None:
            fam = _family("midrange_policy_version")
            fam.add_metric([], snap.policy_version)
            yield fam
        fam = _family("midrange_policy_lag_versions")
        _histogram(fam, [], snap.policy_lag)
        yield fam
        fam = _family("midrange_dropped_chunks")
        # "stale" is always present so a drop-free run still shows a zero line.
        for reason, n in sorted({"stale": 0, **snap.dropped_chunks}.items()):
            fam.add_metric([reason], n)
        yield fam
        fam = _family("midrange_copy_bytes")
        for direction, n in sorted(snap.copy_bytes.items()):
            fam.add_metric([direction], n)
        yield fam
        fam = _family("midrange_episodes")
        for (actor, opponent, outcome), n in sorted(snap.episodes.items()):
            fam.add_metric([str(actor), opponent, outcome], n)
        yield fam
        fam = _family("midrange_episode_length_steps")
        for opponent, hist in sorted(snap.episode_length.items()):
            _histogram(fam, [opponent], hist)
        yield fam
        fam = _family("midrange_env_worker_restarts")
        # Both reasons always present so a fault-free run still shows zero lines.
        for reason, n in sorted({"died": 0, "timeout": 0, **snap.env_worker_restarts}.items()):
            fam.add_metric([reason], n)
        yield fam
        if snap.league_ratings or snap.league_games:
            fam = _family("midrange_league_rating")
            for player, r in sorted(snap.league_ratings.items()):
                fam.add_metric([player], r)
            yield fam
            fam = _family("midrange_league_games")
            for (opponent, outcome), n in sorted(snap.league_games.items()):
                fam.add_metric([opponent, outcome], n)
            yield fam
        yield from self._learner_stats(snap.update_stats)
        if snap.overlap_ratio is not None:
            fam = _family("midrange_overlap_ratio")
            fam.add_metric([], snap.overlap_ratio)
            yield fam

    def _learner_stats(self, stats: dict[str, float]) -> Iterator:
        loss = _family("midrange_learner_loss")
        other = _family("midrange_learner_stat")
        named = {k: _family(f"midrange_learner_{k}") for k in LEARNER_GAUGES}
        for key, value in sorted(stats.items()):
            if key in named:
                named[key].add_metric([], value)
            elif key.startswith("loss_"):
                loss.add_metric([key[len("loss_"):]], value)
            elif key == "loss":
                loss.add_metric(["total"], value)
            else:
                other.add_metric([key], value)
        for fam in (loss, *named.values(), other):
            if fam.samples:
                yield fam

    def _ring_families(self, stats) -> Iterator:
        if stats is None:
            return
        fam = _family("midrange_ring_capacity_slots")
        fam.add_metric([], stats.capacity)
        yield fam
        fam = _family("midrange_ring_slots")
        for state in ("free", "writing", "ready", "reading"):
            fam.add_metric([state], getattr(stats, state))
        yield fam
        for field_name, metric in (
            ("reuses", "midrange_ring_slot_reuses"),
            ("produced_samples", "midrange_ring_produced_samples"),
            ("consumed_samples", "midrange_ring_consumed_samples"),
            ("dropped_samples", "midrange_ring_dropped_samples"),
            ("dropped_chunks", "midrange_ring_dropped_chunks"),
            ("in_flight_samples", "midrange_ring_in_flight_samples"),
        ):
            fam = _family(metric)
            fam.add_metric([], getattr(stats, field_name))
            yield fam

    def _allocator_families(self) -> Iterator:
        keys = {
            "midrange_cuda_memory_allocated_bytes": "allocated_bytes.all.current",
            "midrange_cuda_memory_reserved_bytes": "reserved_bytes.all.current",
            "midrange_cuda_memory_peak_allocated_bytes": "allocated_bytes.all.peak",
            "midrange_cuda_allocations": "allocation.all.allocated",
            "midrange_cuda_segment_allocations": "segment.all.allocated",
            "midrange_cuda_alloc_retries": "num_alloc_retries",
            "midrange_cuda_ooms": "num_ooms",
        }
        families = {name: _family(name) for name in keys}
        pinned = _family("midrange_pinned_host_memory_bytes")
        pinned_allocs = _family("midrange_pinned_host_allocations")
        # is_initialized: never create a CUDA context from the scrape thread.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            for index in range(torch.cuda.device_count()):
                stats = torch.cuda.memory_stats(index)
                for name, key in keys.items():
                    families[name].add_metric([f"cuda:{index}"], stats.get(key, 0))
            # host_memory_stats is recent (older torch: pinned series read 0).
            host_stats = getattr(torch.cuda, "host_memory_stats", None)
            host = host_stats() if host_stats is not None else {}
            pinned.add_metric(["host"], host.get("allocated_bytes.current", 0))
            pinned_allocs.add_metric(["host"], host.get("num_host_alloc", 0))
        else:
            for fam in families.values():
                fam.add_metric(["none"], 0)
            pinned.add_metric(["none"], 0)
            pinned_allocs.add_metric(["none"], 0)
        yield from families.values()
        yield pinned
        yield pinned_allocs
