"""The sim actor: N environments of the batched sim, a policy replica, an opponent and a reward.

An actor writes T-step chunks into ring slots. Each decision step: the learning side's policy
acts on its egocentric observation, the opponent (any ``BaseAgent``) on the other side's, the sim
steps, the reward plug-in scores the transition, and the step's tensors are written into the
slot row ``t``. The value of the final observation of a truncated episode goes into
``bootstrap_values`` and the value of the observation after the last step into ``next_values``.

On CUDA everything is enqueued on the actor's own stream with no host sync inside a chunk (the
step can be replayed from a CUDA graph, see :mod:`actors.cuda_graph`); the slot's
``written_event`` is recorded at the end so the caller can poll for completion.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from actors.stats import EpisodeStats
from agents.base import seeded_generator
from sim import BatchedSim, SimConfig, canonical_device

try:
    from monitoring import span
except ImportError:  # the facade is optional for the actor itself
    from torch.profiler import record_function as span


class InjectedFault(RuntimeError):
    """Raised by the fault-injection hook (``run.fail_actor_at_chunk``) to test recovery."""


@dataclass
class StepTargets:
    """Where one decision step's outputs go: rows of a ring slot, or static graph buffers."""

    obs: Tensor
    actions: Tensor
    log_probs: Tensor
    values: Tensor
    rewards: Tensor
    terminated: Tensor
    truncated: Tensor
    bootstrap_values: Tensor
    done: Tensor
    lengths: Tensor

    def copy_from(self, other: StepTargets) -> None:
        """Copy every field from ``other`` (same shapes)."""
        for name in self.__dataclass_fields__:
            getattr(self, name).copy_(getattr(other, name))


class _Staging:
    """A device-side twin of a host-memory slot: same field names, same storage() layout."""

    def __init__(self, slot: Any, device: torch.device):
        self.spec = slot.spec
        self._storage = {k: torch.zeros_like(v, device=device) for k, v in slot.storage().items()}
        for name, t in self._storage.items():
            setattr(self, name, t)
        self.terminated = self._storage["terminated_bytes"].view(torch.bool)
        self.truncated = self._storage["truncated_bytes"].view(torch.bool)

    def storage(self) -> dict[str, Tensor]:
        """Every tensor by name, matching the slot's ``storage()``."""
        return self._storage


class SimActor:
    """One experience producer over its own batch of environments.

    Args:
        actor_id: stamp written into every slot this actor commits.
        sim_config: the duel's settings.
        num_envs: environments B.
        rollout_len: decision steps T per chunk.
        policy: the actor's replica of the learner's ``ActorCritic`` (on ``device``).
        opponent: a ``BaseAgent`` flying the other side, batched over ``num_envs``.
        reward: a ``BaseReward`` scoring the learning side's transitions.
        device: where the sim, replica, opponent and reward live.
        seed: the sim's scenario seed (distinct per actor and restart).
        learning_side: 0 (red) or 1 (blue).
        cuda_graph: capture the decision step as a CUDA graph (CUDA only).
        compile_sim: compile the sim step with ``torch.compile``.
        fail_at_chunk: fault injection; raise :class:`InjectedFault` half-way through this
            chunk (counted from 0; -1 never).
        sync_free: never read device data on the host inside a chunk (branchless sim steps,
            bootstrap values computed every step). Default: on for accelerators, off on the
            CPU, where a host read is free and lets a step skip work. Both give the same samples.
        stream: the CUDA stream to run on (a restarted actor takes over its predecessor's);
            default: a new one from PyTorch's pool.

    The policy samples from the actor's own generator (:attr:`rng`, seeded from ``seed``), so an
    actor's samples depend on its seed alone, whichever threads and streams run beside it.
    """

    def __init__(
        self,
        actor_id: int,
        sim_config: SimConfig,
        num_envs: int,
        rollout_len: int,
        policy: torch.nn.Module,
        opponent: Any,
        reward: Any,
        device: torch.device | str = "cpu",
        seed: int = 0,
        learning_side: int = 0,
        cuda_graph: bool = False,
        compile_sim: bool = False,
        fail_at_chunk: int = -1,
        sync_free: bool | None = None,
        stream: torch.cuda.Stream | None = None,
    ):
        if cuda_graph and sync_free is False:
            raise ValueError("cuda_graph needs sync_free (a captured step cannot read device data)")
        if learning_side not in (0, 1):
            raise ValueError(f"learning_side must be 0 or 1, got {learning_side!r}")
        if isinstance(rollout_len, bool) or not isinstance(rollout_len, int) or rollout_len < 1:
            raise ValueError(f"rollout_len must be an integer >= 1, got {rollout_len!r}")
        self.actor_id = actor_id
        self.device = canonical_device(device)
        self.rollout_len = rollout_len
        self.side = learning_side
        self.policy = policy
        self.opponent = opponent
        self.reward = reward
        self.fail_at_chunk = fail_at_chunk
        self.policy_version = -1
        self.chunks_written = 0
        self.cuda = self.device.type == "cuda"
        self.sync_free = self.device.type != "cpu" if sync_free is None else bool(sync_free)
        """No host read of device data inside a chunk (see ``sync_free`` above)."""
        self.stream = (stream or torch.cuda.Stream(self.device)) if self.cuda else None
        if self.stream is not None:
            # The replica, opponent and reward were made on the caller's stream.
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
        # A fixed odd-multiplier mix keeps the policy's stream apart from the opponent's and
        # the sim's of the same seed.
        self.rng = seeded_generator(self.device, (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % (1 << 63))
        """The generator the policy samples from (None on the meta device, which has none)."""
        with self._on_stream(), torch.no_grad():
            self.sim = BatchedSim(num_envs, sim_config, self.device, seed=seed, compile=compile_sim,
                                  branchless=self.sync_free)
            self.num_envs = num_envs
            self.obs_dim = self.sim.obs_dim
            self._obs = self.sim.reset().clone()
            action_dtype = torch.int64 if sim_config.action_mode == "discrete" else torch.float32
            self._actions = torch.zeros(num_envs, 2, 3, dtype=action_dtype, device=self.device)
            self.stats = EpisodeStats(num_envs, rollout_len, learning_side, self.device)
        self._graph = None
        self.graph_error = ""
        """Why CUDA graph capture was not used, if it was asked for and failed."""
        if cuda_graph and self.cuda:
            from actors.cuda_graph import CapturedStep

            try:
                self._graph = CapturedStep(self)
            except Exception as exc:  # capture is an optimisation: fall back to eager, loudly
                self.graph_error = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"actor {actor_id}: CUDA graph capture failed, stepping eagerly: "
                              f"{self.graph_error}", RuntimeWarning, stacklevel=2)
        self._staging: Any = None

    # ------------------------------------------------------------------ properties
    @property
    def samples_per_chunk(self) -> int:
        """Agent-steps per chunk (T × B, one learning fighter per environment)."""
        return self.rollout_len * self.num_envs

    @property
    def physics_steps_per_chunk(self) -> int:
        """Physics env-steps per chunk (T × B × physics steps per decision)."""
        return self.samples_per_chunk * self.sim.physics_steps_per_decision

    def generators(self) -> list[torch.Generator]:
        """Every generator a step draws from besides the default one: the policy's, the
        opponent's and the reward's (a CUDA graph registers them and restores their states)."""
        own = [] if self.rng is None else [self.rng]
        return own + list(self.opponent.generators()) + list(getattr(self.reward, "generators", list)())

    @property
    def uses_cuda_graph(self) -> bool:
        """Whether chunks replay a captured CUDA graph."""
        return self._graph is not None

    def _on_stream(self) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    # ------------------------------------------------------------------ weights
    def sync_weights(self, publisher: Any) -> int:
        """Copy newer published weights into the replica (on this actor's stream)."""
        self.policy_version = publisher.pull(
            self.policy, self.policy_version, reader_id=self.actor_id, stream=self.stream
        )
        return self.policy_version

    # ------------------------------------------------------------------ rollout
    def step_into(self, targets: StepTargets) -> None:
        """One decision step for every environment, its outputs written to ``targets``.

        Static shapes and masks only (capturable); on the eager CPU path the bootstrap value
        is computed only when some episode was truncated, since a host read costs nothing there.
        """
        side = self.side
        own = self._obs[:, side]
        actions, log_probs, values = self.policy.act(own, generator=self.rng)
        self._actions[:, side].copy_(actions)
        self._actions[:, 1 - side].copy_(self.opponent.act(self._obs[:, 1 - side]))
        out = self.sim.step(self._actions)
        final_own = out.final_obs[:, side]
        info = {
            "reward": out.reward[:, side],
            "terminated": out.terminated,
            "truncated": out.truncated,
            "winner": out.winner,
            "end_reason": out.end_reason,
            "launches": out.launches[:, side],
            "hits": out.hits[:, side],
        }
        reward = self.reward.compute(own, final_own, actions, out.done, info)
        targets.obs.copy_(own)
        targets.actions.copy_(actions)
        targets.log_probs.copy_(log_probs)
        targets.values.copy_(values)
        targets.rewards.copy_(reward)
        targets.terminated.copy_(out.terminated)
        targets.truncated.copy_(out.truncated)
        if self.sync_free or bool(out.truncated.any()):
            boot = self.policy.get_value(final_own)
            targets.bootstrap_values.copy_(torch.where(out.truncated, boot, 0.0))
        else:
            targets.bootstrap_values.zero_()
        targets.done.copy_(out.done)
        targets.lengths.copy_(out.episode_steps)
        self.stats.update_counts(out, reward)
        self.opponent.reset(out.done)
        self.reward.reset(out.done)
        self._obs.copy_(out.obs)

    def slot_targets(self, slot: Any, t: int) -> StepTargets:
        """Row ``t`` of a ring slot (and of the chunk's episode buffers) as step targets."""
        return StepTargets(
            obs=slot.obs[t], actions=slot.actions[t], log_probs=slot.log_probs[t],
            values=slot.values[t], rewards=slot.rewards[t], terminated=slot.terminated[t],
            truncated=slot.truncated[t], bootstrap_values=slot.bootstrap_values[t],
            done=self.stats.chunk_done[t], lengths=self.stats.chunk_lengths[t],
        )

    @torch.no_grad()
    def rollout(self, slot: Any) -> None:
        """Write one T-step chunk into ``slot`` (enqueued on this actor's stream on CUDA).

        The slot must be WRITING and owned by the caller; on CUDA the stream first waits for
        the learner's last read of the slot, and ``slot.written_event`` is recorded at the end.
        """
        spec = slot.spec
        if (spec.rollout_len, spec.num_envs, spec.obs_dim) != (self.rollout_len, self.num_envs, self.obs_dim):
            raise ValueError(
                f"slot shape (T={spec.rollout_len}, B={spec.num_envs}, D={spec.obs_dim}) does not "
                f"match actor {self.actor_id} (T={self.rollout_len}, B={self.num_envs}, D={self.obs_dim})"
            )
        caller = torch.cuda.current_stream(self.device) if self.stream is not None else None
        with self._on_stream(), span(f"actor:{self.actor_id}:rollout"):
            if self.stream is not None:
                # Work the caller enqueued on its stream (the debug ring's magic fill, the
                # gather of the previous chunk's episode lengths) comes before this chunk.
                self.stream.wait_stream(caller)
                if slot.read_event is not None:
                    self.stream.wait_event(slot.read_event)
            # A slot in host memory (pinned ring) is written through a device-side staging
            # chunk and copied out once, non-blocking, instead of a blocking copy per step.
            target = slot if slot.obs.device == self.device else self._staging_for(slot)
            self.stats.begin_chunk()
            for t in range(self.rollout_len):
                if self.chunks_written == self.fail_at_chunk and t == self.rollout_len // 2:
                    raise InjectedFault(
                        f"actor {self.actor_id}: injected fault in chunk {self.chunks_written}, step {t}"
                    )
                targets = self.slot_targets(target, t)
                if self._graph is not None:
                    self._graph.replay_into(targets)
                else:
                    self.step_into(targets)
            target.next_values.copy_(self.policy.get_value(self._obs[:, self.side]))
            if target is not slot:
                for name, src in target.storage().items():
                    slot.storage()[name].copy_(src, non_blocking=True)
            if self.stream is not None and slot.written_event is not None:
                slot.written_event.record(self.stream)
        self.chunks_written += 1

    def _staging_for(self, slot: Any) -> _Staging:
        if self._staging is None or self._staging.spec != slot.spec:
            self._staging = _Staging(slot, self.device)
        return self._staging

    def check_errors(self) -> None:
        """Raise a deferred sim error (bad actions); one host read, at chunk boundaries."""
        self.sim.check_errors()
