"""A decision step captured as a CUDA graph (CUDA only).

One decision step (policy forward and sampling, opponent, sim step with auto-reset, reward,
statistics) launches hundreds of small kernels; replaying them from a graph removes the launch
overhead that otherwise bounds throughput at moderate batch sizes. The graph writes into static
step buffers; each replay is followed by a few copies into the slot row, all on the actor's
stream, so a chunk never syncs with the host.

Random numbers: the policy samples from the actor's own generator and a random opponent from
its own, never from the process-wide default one, so graphs replayed concurrently on several
streams never share random state. Warm-up and capture advance the sim and these generators, so
afterwards the step's owner restores them (``restart``): the sim is reseeded and reset (episode 0 of every
environment again) and the generators' states put back, which makes graph replay produce the
same samples as eager stepping from the same seed. (The seed is baked into the graph: an actor
with a graph is never reseeded; a restarted actor is a new actor with a new capture.)

Concurrency: ``capture_error_mode="thread_local"``, because a failed actor is restarted (and its
step captured again) in a worker thread while the other actors, the learner and the event loop
keep issuing CUDA work, which the default global mode forbids. PyTorch allows one capture at a
time per process and a device-wide synchronize invalidates a capture under way, so captures,
and the few device-wide synchronizations elsewhere (``--profile``'s end), hold
:data:`CAPTURE_LOCK`. Each capture starts with a device-wide synchronize of its own, so a
restart stalls the other actors once. After a failed capture no further capture is tried in the
process (on some PyTorch versions a failed capture leaves the allocator's capture state behind);
those actors step eagerly, and ``pipeline.launch`` reports it.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch

WARMUP_STEPS = 3
"""Eager steps on the capture stream before capture (lazy init, cuBLAS workspaces, autotune)."""

CAPTURE_LOCK = threading.RLock()
"""Held during a capture, and by anything that synchronizes the whole device meanwhile."""

_failed_capture = ""
"""The first capture failure of this process ("" while none failed)."""


class CaptureDisabled(RuntimeError):
    """An earlier capture in this process failed; this one was not tried."""


class CapturedStep:
    """A decision step ``step(static)`` captured as a CUDA graph writing into ``static``.

    Args:
        step: one decision step writing its outputs into the targets it is given.
        static: the static targets the graph writes; after a replay the caller's targets copy
            them with ``targets.copy_from(static)``.
        generators: every generator the step draws from besides the default one (registered
            with the graph; their states are put back after capture).
        restart: puts the stepping state back to where eager stepping would start (called
            after warm-up and capture, which advanced it).
        stream: the stream to capture and replay on.
        device: the CUDA device.
    """

    def __init__(self, step: Callable[[Any], None], static: Any, generators: list[torch.Generator],
                 restart: Callable[[], None], stream: torch.cuda.Stream | None,
                 device: torch.device):
        global _failed_capture
        if device.type != "cuda" or stream is None:
            raise ValueError(f"CUDA graph capture needs a CUDA device and stream, got {device}")
        self.static = static
        states = [g.get_state() for g in generators]
        stream.wait_stream(torch.cuda.current_stream(device))
        with CAPTURE_LOCK:
            if _failed_capture:
                raise CaptureDisabled(f"an earlier capture in this process failed ({_failed_capture})")
            try:
                with torch.cuda.stream(stream), torch.no_grad():
                    for _ in range(WARMUP_STEPS):
                        step(static)
                    self.graph = torch.cuda.CUDAGraph()
                    _register_generators(self.graph, generators)
                    with torch.cuda.graph(self.graph, stream=stream, capture_error_mode="thread_local"):
                        step(static)
            except Exception as exc:
                _failed_capture = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                # Back to the state eager stepping would start from (also when capture failed
                # and the actor falls back to eager).
                with torch.cuda.stream(stream), torch.no_grad():
                    restart()
                stream.synchronize()
                for g, state in zip(generators, states, strict=True):
                    g.set_state(state)

    def replay_into(self, targets: Any) -> None:
        """Replay one decision step and copy its outputs into ``targets`` (on the current stream)."""
        self.graph.replay()
        targets.copy_from(self.static)


def _register_generators(graph: torch.cuda.CUDAGraph, generators: list[torch.Generator]) -> None:
    """Tell the graph of generators other than the default one. PyTorch 2.4 to 2.10 require
    it before capture; later versions register lazily and keep the call as a deprecated no-op."""
    if not generators or not hasattr(graph, "register_generator_state"):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        for g in generators:
            graph.register_generator_state(g)
