"""A decision step compiled as one function with ``torch.compile`` (CPU).

On CUDA the whole decision step (policy forward and sampling, opponent, sim step, reward,
statistics, slot writes) is replayed from one captured graph (:mod:`actors.cuda_graph`). This is
its CPU counterpart: the same ``SimActor.step_into`` traced by ``torch.compile`` into one graph,
so the policy's, the opponent's, the reward's and the statistics' small ops become a few fused
loops instead of a few hundred dispatches. Two things a trace cannot hold are moved to its
edges, the same way for the eager step, so both give the same samples:

- the policy's random numbers are drawn from the actor's generator before the step
  (``ActorCritic.draw_noise``) and passed in;
- the sim step (the native kernel, and the host-indexed start of the episodes that ended, a
  data-dependent selection) is one opaque op, ``midrange_actor::sim_step``, which writes the
  step result's tensors in place.

The compiled function writes into static step targets, copied into the slot row afterwards (as
a CUDA graph replay does), so every call sees the same tensors and nothing recompiles.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

_sims: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_handles = itertools.count()
_lock = threading.Lock()


def register_sim(sim: Any) -> int:
    """A handle for ``sim`` that :func:`sim_step` takes (a trace holds ints, not objects)."""
    with _lock:
        handle = next(_handles)
        _sims[handle] = sim
    return handle


def result_tensors(sim: Any) -> list[Tensor]:
    """The step result's tensors, in the order :func:`sim_step` writes them."""
    r = sim.result
    return [r.obs, r.final_obs, r.reward, r.terminated, r.truncated, r.done, r.winner,
            r.end_reason, r.episode_steps, r.launches, r.hits]


@torch.library.custom_op("midrange_actor::sim_step", mutates_args=("outputs",), device_types="cpu")
def sim_step(handle: int, actions: Tensor, outputs: list[Tensor]) -> None:
    """Step the registered sim with ``actions`` and leave its result in ``outputs``. They are
    the result's own tensors; should the compiler pass copies instead, they are filled."""
    sim = _sims[handle]
    sim.step(actions)
    for out, value in zip(outputs, result_tensors(sim), strict=True):
        if out.data_ptr() != value.data_ptr():
            out.copy_(value)


@sim_step.register_fake
def _(handle: int, actions: Tensor, outputs: list[Tensor]) -> None:
    return None


class CompiledStep:
    """``step(static, noise)`` compiled once, writing into ``static``; :meth:`run_into` draws
    the step's noise, runs it and copies the outputs into the caller's targets."""

    def __init__(self, step: Callable[[Any, Tensor], None], static: Any,
                 draw_noise: Callable[[], Tensor]):
        self.static = static
        self._draw_noise = draw_noise
        self._step = torch.compile(step, dynamic=False)

    def run_into(self, targets: Any) -> None:
        """One decision step into ``targets``."""
        self._step(self.static, self._draw_noise())
        targets.copy_from(self.static)
