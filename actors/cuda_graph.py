"""The actor's decision step captured as a CUDA graph (CUDA only).

One decision step (policy forward and sampling, opponent, sim step with auto-reset, reward,
statistics) launches hundreds of small kernels; replaying them from a graph removes the launch
overhead that otherwise bounds throughput at moderate batch sizes. The graph writes into static
step buffers; each replay is followed by a few copies into the slot row, all on the actor's
stream, so a chunk never syncs with the host.

Warm-up and capture advance the sim and the random generators, so afterwards the actor restores
them: the sim is reseeded and reset (episode 0 of every environment again) and the states of the
default CUDA generator and of the opponent's own generators put back, which makes graph replay
produce the same samples as eager stepping from the same seed.

Capture uses ``capture_error_mode="thread_local"``: a failed actor is restarted (and its step
captured again) in a worker thread while the other actors, the learner and the event loop keep
issuing CUDA work, which the default global mode would forbid.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from actors.actor import StepTargets

WARMUP_STEPS = 3
"""Eager steps on the capture stream before capture (lazy init, cuBLAS workspaces, autotune)."""


class CapturedStep:
    """A captured :meth:`actors.actor.SimActor.step_into` writing into static buffers."""

    def __init__(self, actor: Any):
        if actor.device.type != "cuda":
            raise ValueError(f"CUDA graph capture needs a CUDA device, got {actor.device}")
        self.actor = actor
        B, D, dev = actor.num_envs, actor.obs_dim, actor.device
        act_dtype = actor._actions.dtype
        self.static = StepTargets(
            obs=torch.zeros(B, D, device=dev),
            actions=torch.zeros(B, 3, dtype=act_dtype, device=dev),
            log_probs=torch.zeros(B, device=dev),
            values=torch.zeros(B, device=dev),
            rewards=torch.zeros(B, device=dev),
            terminated=torch.zeros(B, dtype=torch.bool, device=dev),
            truncated=torch.zeros(B, dtype=torch.bool, device=dev),
            bootstrap_values=torch.zeros(B, device=dev),
            done=torch.zeros(B, dtype=torch.bool, device=dev),
            lengths=torch.zeros(B, dtype=torch.int64, device=dev),
        )
        if not actor.sync_free:
            raise ValueError("CUDA graph capture needs a sync-free actor (no host reads in a step)")
        rng_state = torch.cuda.get_rng_state(dev)
        generators = list(actor.opponent.generators())
        generator_states = [g.get_state() for g in generators]
        stream = actor.stream
        stream.wait_stream(torch.cuda.current_stream(dev))
        try:
            with torch.cuda.stream(stream), torch.no_grad():
                for _ in range(WARMUP_STEPS):
                    actor.step_into(self.static)
                self.graph = torch.cuda.CUDAGraph()
                _register_generators(self.graph, generators)
                with torch.cuda.graph(self.graph, stream=stream, capture_error_mode="thread_local"):
                    actor.step_into(self.static)
        finally:
            # Back to the state eager stepping would start from (also when capture failed and
            # the actor falls back to eager).
            with torch.cuda.stream(stream), torch.no_grad():
                actor.sim.reseed(actor.sim.seed)
                actor._obs.copy_(actor.sim.reset())
                everyone = torch.ones(B, dtype=torch.bool, device=dev)
                actor.opponent.reset(everyone)
                actor.reward.reset(everyone)
                actor.stats.reset()
            stream.synchronize()
            torch.cuda.set_rng_state(rng_state, dev)
            for g, state in zip(generators, generator_states, strict=True):
                g.set_state(state)

    def replay_into(self, targets: StepTargets) -> None:
        """Replay one decision step and copy its outputs into ``targets`` (on the current stream)."""
        self.graph.replay()
        targets.copy_from(self.static)


def _register_generators(graph: Any, generators: list[torch.Generator]) -> None:
    """Tell the graph of generators other than the default one. PyTorch 2.4 to 2.10 require
    it before capture; later versions register lazily and keep the call as a deprecated no-op."""
    if not generators or not hasattr(graph, "register_generator_state"):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        for g in generators:
            graph.register_generator_state(g)
