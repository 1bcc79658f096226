"""Histogram accumulators that cost no host sync: host floats in Python lists, tensors on their
own device (and CUDA stream), summed only when a scrape reads them.

Bucket semantics follow Prometheus: a value ``v`` falls in the first bucket whose upper bound
``le`` satisfies ``v <= le``; values above the last bound land in the implicit ``+Inf`` bucket.
"""

from __future__ import annotations

import itertools
import math
import threading
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

import torch

WAIT_BUCKETS_S: tuple[float, ...] = (
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
    1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
"""Slot-wait and batch-wait buckets, seconds: from one microsecond (a wait that did not happen)
up to ten seconds (a stalled pipeline)."""

POLICY_LAG_BUCKETS: tuple[float, ...] = (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 64)
"""Policy-lag buckets, in policy versions (0: the chunk came from the current policy)."""

EPISODE_LENGTH_BUCKETS: tuple[float, ...] = (
    10, 20, 40, 60, 80, 100, 150, 200, 300, 400, 500, 600, 800, 1200,
)
"""Episode-length buckets, in decision steps (600 is a full 300 s episode at the defaults)."""


@dataclass(frozen=True)
class HistogramSnapshot:
    """A histogram as read at scrape time."""

    bounds: tuple[float, ...]
    """Upper bounds (``le``) of the finite buckets, ascending."""
    cumulative: tuple[int, ...]
    """Observations ``<= bounds[i]`` for each bound, then the total (the ``+Inf`` bucket)."""
    sum: float
    """Sum of all observed values."""

    @property
    def count(self) -> int:
        """Total number of observations."""
        return self.cumulative[-1]


class _DevicePart:
    """Bucket counts and sum of one device stream's observations, kept on that device."""

    __slots__ = ("boundaries", "counts", "event", "value_sum")

    def __init__(self, bounds: tuple[float, ...], device: torch.device) -> None:
        # non_blocking: building the accumulators must not sync either.
        self.boundaries = torch.tensor(bounds, dtype=torch.float64).to(device, non_blocking=True)
        self.counts = torch.zeros(len(bounds) + 1, dtype=torch.int64, device=device)
        self.value_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.event = torch.cuda.Event() if device.type == "cuda" else None


def stream_key(device: torch.device) -> tuple[str, int]:
    """Key of the caller's current stream on ``device``: per-stream accumulators never race."""
    if device.type == "cuda":
        return (str(device), torch.cuda.current_stream(device).cuda_stream)
    return (str(device), 0)


def read_device(tensor: torch.Tensor, event: torch.cuda.Event | None) -> torch.Tensor:
    """Copy an accumulator to the host at scrape time, ordered after the last update's event."""
    if event is not None:
        # The update ran on the producer's stream; make the reading stream wait for it.
        torch.cuda.current_stream(tensor.device).wait_event(event)
    return tensor.to("cpu")


class DeviceHistogram:
    """A histogram fed from Python floats and from tensors, without host syncs on update.

    ``observe`` (one float) and ``observe_sequence`` (floats/ints) update Python lists;
    ``observe_tensor`` updates counts that live on the tensor's device, one set per (device,
    stream), so concurrent producers on different CUDA streams never touch the same memory.
    """

    def __init__(self, bounds: Sequence[float]) -> None:
        bounds_t = tuple(float(b) for b in bounds)
        if not bounds_t or any(not math.isfinite(b) for b in bounds_t):
            raise ValueError(f"histogram bounds must be finite and non-empty, got {bounds!r}")
        if any(b2 <= b1 for b1, b2 in itertools.pairwise(bounds_t)):
            raise ValueError(f"histogram bounds must be strictly increasing, got {bounds!r}")
        self.bounds = bounds_t
        self._counts = [0] * (len(bounds_t) + 1)
        self._sum = 0.0
        self._parts: dict[tuple[str, int], _DevicePart] = {}
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        """Record one host-side value."""
        index = bisect_left(self.bounds, value)
        with self._lock:
            self._counts[index] += 1
            self._sum += value

    def observe_sequence(self, values: Sequence[float]) -> None:
        """Record several host-side values."""
        with self._lock:
            for value in values:
                self._counts[bisect_left(self.bounds, value)] += 1
                self._sum += value

    def observe_tensor(self, values: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Record the entries of a tensor (where ``mask`` is True) on the tensor's device.

        A mask instead of boolean indexing keeps the shape static: indexing would read the
        number of selected entries back to the host, a sync.
        """
        key = stream_key(values.device)
        part = self._parts.get(key)
        if part is None:
            with self._lock:
                part = self._parts.setdefault(key, _DevicePart(self.bounds, values.device))
        flat = values.reshape(-1).to(torch.float64)
        index = torch.bucketize(flat, part.boundaries, right=False)
        if mask is None:
            weights = torch.ones_like(index)
            part.value_sum.add_(flat.sum())
        else:
            weights = mask.reshape(-1).to(torch.int64)
            part.value_sum.add_((flat * weights).sum())
        part.counts.index_add_(0, index, weights)
        if part.event is not None:
            part.event.record(torch.cuda.current_stream(values.device))

    def snapshot(self) -> HistogramSnapshot:
        """Read host and device parts (syncing with the producers' streams) and sum them."""
        with self._lock:
            counts = list(self._counts)
            value_sum = self._sum
            parts = list(self._parts.values())
        for part in parts:
            part_counts = read_device(part.counts, part.event).tolist()
            counts = [a + b for a, b in zip(counts, part_counts, strict=True)]
            value_sum += float(read_device(part.value_sum, part.event))
        cumulative: list[int] = []
        running = 0
        for c in counts:
            running += c
            cumulative.append(running)
        return HistogramSnapshot(self.bounds, tuple(cumulative), value_sum)
