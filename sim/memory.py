"""What one environment of :class:`~sim.batched.BatchedSim` costs in memory, measured rather
than written down (:meth:`~sim.batched.BatchedSim.estimate_bytes`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import torch

from sim.config import SimConfig
from sim.device import peak_bytes
from sim.reach.missile import cached_tables

_measuring: ContextVar[bool] = ContextVar("sim_memory_measuring", default=False)
"""Set while :func:`bytes_per_env` builds its measurement sims."""

MEASURED_ENVS = 256
"""Batch size of the measurement behind :meth:`~sim.batched.BatchedSim.estimate_bytes` (large enough that
the few bytes not proportional to the batch round away)."""


def bytes_per_env(config: SimConfig, sim_type: Callable[..., Any]) -> int:
    """Peak bytes per environment of building (``sim_type``: :class:`~sim.batched.BatchedSim`,
    which calls this, so the two modules do not import each other), resetting and stepping a
    small CPU sim whose every episode ends in the step (the data-dependent form then resets and
    observes them all: its worst case)."""
    # A physics step's temporaries are freed before the next one starts, so one physics step
    # per decision has the same peak as many; and an episode one decision long ends in the
    # step. Configs differing only in those fields share one measurement.
    return _measure_bytes_per_env(config.replace(substeps=1, time_scale=1.0, max_time_s=config.dt_s), sim_type)


@functools.lru_cache(maxsize=32)
def _measure_bytes_per_env(config: SimConfig, sim_type: Callable[..., Any]) -> int:
    n = MEASURED_ENVS
    dtype = torch.int64 if config.action_mode == "discrete" else getattr(torch, config.dtype)

    def run(sync_free: bool) -> None:
        # The torch path allocates temporaries per phase; the native kernel works in place, so
        # the torch path's peak bounds both (and is what accelerators run).
        sim = sim_type(n, config, device="cpu", sync_free=sync_free, backend="torch")
        sim.reset()
        sim.step(torch.zeros(n, 2, 3, dtype=dtype, device="cpu"))

    if config.obs_reach:
        # The reach block's tables are the process's, shared by every sim of the config, not
        # per-environment memory: measured here, outside the counting mode (where each of the
        # shots' small ops would pass through Python), so the measurement sims only look them up.
        cached_tables(config, "cpu", config.dtype)
    token = _measuring.set(True)
    try:
        peak = max(peak_bytes(functools.partial(run, sync_free), device_type="cpu") for sync_free in (False, True))
    finally:
        _measuring.reset(token)
    return -(-peak // n)


def measuring() -> bool:
    """Whether the calling code runs inside :func:`bytes_per_env`'s measurement (whose small
    sims skip the memory check that asks for the estimate being measured)."""
    return _measuring.get()
