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
from collections.abc import Callable
from typing import Any

import torch

from actors.compiled_step import CompiledStep, register_sim, result_tensors, sim_step
from actors.cuda_graph import CapturedStep
from actors.protocol import Policy, WeightSource
from actors.stats import ChunkEpisodes, EpisodeStats
from actors.step import ChunkInterrupted, ContractViolation, DecisionStep, StepTargets, check_slot
from agents.base import check_agent_actions, seeded_generator
from agents.grouped import GroupedOpponent
from core.schema import Rollout, RolloutSpec
from monitoring import span
from rewards.base import check_reward_output
from sim import BatchedSim, SimConfig, canonical_device

VIOLATIONS = ("opponent actions out of range or non-finite", "non-finite rewards",
              "non-finite policy outputs (log-probs or values)")
"""What the actor's sticky flags record, in order."""


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
        compile_step: compile the whole decision step as one function with ``torch.compile``
            (CPU only; :mod:`actors.compiled_step`). The same samples as the eager step.
        compile_sim: compile the sim step with ``torch.compile``.
        sync_free: never read device data on the host inside a chunk (sync-free sim steps,
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
        policy: Policy,
        opponent: Any,
        reward: Any,
        device: torch.device | str = "cpu",
        seed: int = 0,
        learning_side: int = 0,
        cuda_graph: bool = False,
        compile_step: bool = False,
        compile_sim: bool = False,
        sync_free: bool | None = None,
        stream: torch.cuda.Stream | None = None,
    ):
        if cuda_graph and sync_free is False:
            raise ValueError("cuda_graph needs sync_free (a captured step cannot read device data)")
        if compile_step and canonical_device(device).type != "cpu":
            raise ValueError("compile_step is the CPU's compiled decision step; on CUDA use cuda_graph")
        if compile_step and not hasattr(policy, "draw_noise"):
            raise ValueError(f"compile_step needs a policy with draw_noise(), not {type(policy).__name__}")
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
        self.policy_version = -1
        self.chunks_written = 0
        self.cuda = self.device.type == "cuda"
        self.sync_free = self.device.type != "cpu" if sync_free is None else bool(sync_free)
        """No host read of device data inside a chunk (see ``sync_free`` above)."""
        self._host_reads = not (self.sync_free or compile_step)
        """Whether a step may read device data on the host (the eager CPU step only)."""
        self._sim_handle = -1
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
                                  sync_free=self.sync_free)
            self.num_envs = num_envs
            self.obs_dim = self.sim.obs_dim
            self._obs = self.sim.reset().clone()
            self.action_mode = sim_config.action_mode
            action_dtype = torch.int64 if sim_config.action_mode == "discrete" else torch.float32
            self.spec = RolloutSpec(rollout_len, num_envs, self.obs_dim, 3, action_dtype=action_dtype)
            """The chunks this actor writes (slots it is handed must have this spec)."""
            self._actions = torch.zeros(num_envs, 2, 3, dtype=action_dtype, device=self.device)
            self._bootstrap = torch.zeros(num_envs, device=self.device)
            self._violations = torch.zeros(len(VIOLATIONS), dtype=torch.bool, device=self.device)
            """Sticky flags (see :data:`VIOLATIONS`), set on the device, read at chunk ends."""
            self.stats = EpisodeStats(num_envs, rollout_len, learning_side, self.device,
                                      per_env=isinstance(opponent, GroupedOpponent))
        self._graph: CapturedStep | None = None
        self.graph_error = ""
        """Why CUDA graph capture was not used, if it was asked for and failed."""
        if cuda_graph and self.cuda:
            static = StepTargets(self.spec.allocate_step(self.device),
                                 torch.zeros(num_envs, dtype=torch.bool, device=self.device),
                                 torch.zeros(num_envs, dtype=torch.int64, device=self.device))
            try:
                self._graph = CapturedStep(self.step_into, static, self.generators(),
                                           self.restart_episodes, self.stream, self.device)
            except Exception as exc:  # capture is an optimisation: fall back to eager, loudly
                self.graph_error = f"{type(exc).__name__}: {exc}"
                warnings.warn(f"actor {actor_id}: CUDA graph capture failed, stepping eagerly: "
                              f"{self.graph_error}", RuntimeWarning, stacklevel=2)
        self._compiled: CompiledStep | None = None
        if compile_step:
            opponent.prepare()
            self._sim_handle = register_sim(self.sim)
            self._sim_outputs = result_tensors(self.sim)
            static = StepTargets(self.spec.allocate_step(self.device),
                                 torch.zeros(num_envs, dtype=torch.bool, device=self.device),
                                 torch.zeros(num_envs, dtype=torch.int64, device=self.device))
            self._compiled = CompiledStep(self.step_into, static,
                                          lambda: policy.draw_noise(num_envs, self.rng))  # type: ignore[attr-defined]
        self._staging: Rollout | None = None

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
    def uses_compiled_step(self) -> bool:
        """Whether decision steps run the compiled function (CPU)."""
        return self._compiled is not None

    @property
    def uses_cuda_graph(self) -> bool:
        """Whether chunks replay a captured CUDA graph."""
        return self._graph is not None

    @property
    def steps_on_event_loop(self) -> bool:
        """Never: the sim steps in this process, so the loops run :meth:`rollout` in a thread."""
        return False

    @property
    def league_seat(self) -> SimActor:
        """The actor itself: a league reads its opponent and statistics directly."""
        return self

    def _on_stream(self) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    # ------------------------------------------------------------------ weights
    def sync_weights(self, source: WeightSource) -> int:
        """Copy newer published weights into the replica (on this actor's stream)."""
        self.policy_version = source.pull(
            self.policy, self.policy_version, reader_id=self.actor_id, stream=self.stream
        )
        return self.policy_version

    # ------------------------------------------------------------------ rollout
    def step_into(self, targets: StepTargets, noise: torch.Tensor | None = None) -> None:
        """One decision step for every environment, its outputs written to ``targets``; the
        policy samples with ``noise`` if given (the compiled step), else from :attr:`rng`.

        Static shapes and masks only (capturable); on the eager CPU path the bootstrap value
        is computed only when some episode was truncated, since a host read costs nothing there.
        """
        side = self.side
        own = self._obs[:, side]
        if noise is None:
            actions, log_probs, values = self.policy.act(own, generator=self.rng)
        else:
            actions, log_probs, values = self.policy.act(own, noise=noise)  # type: ignore[call-arg]
        opponent_actions = self.opponent.act(self._obs[:, 1 - side])
        try:
            bad_opponent = check_agent_actions(opponent_actions, self.num_envs, self.action_mode,
                                               f"opponent {type(self.opponent).__name__}")
        except ValueError as exc:
            raise ContractViolation(str(exc)) from None
        self._actions[:, side].copy_(actions)
        self._actions[:, 1 - side].copy_(opponent_actions)
        if self._sim_handle >= 0:
            sim_step(self._sim_handle, self._actions, self._sim_outputs)  # opaque to the trace
            out = self.sim.result
        else:
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
        try:
            bad_reward = check_reward_output(reward, self.num_envs, f"reward {type(self.reward).__name__}")
        except ValueError as exc:
            raise ContractViolation(str(exc)) from None
        bad_policy = ~(log_probs.isfinite().all() & values.isfinite().all())
        self._violations |= torch.stack([bad_opponent, bad_reward, bad_policy])
        if not self._host_reads or bool(out.truncated.any()):
            boot = self.policy.get_value(final_own)
            self._bootstrap.copy_(torch.where(out.truncated, boot, 0.0))
        else:
            self._bootstrap.zero_()
        step = DecisionStep(obs=own, actions=actions, log_probs=log_probs, values=values,
                            rewards=reward, bootstrap_values=self._bootstrap,
                            opponent_actions=self._actions[:, 1 - side], result=out)
        for f in self.spec.step_fields:
            targets.fields[f.name].copy_(f.read(step))
        targets.done.copy_(out.done)
        targets.lengths.copy_(out.episode_steps)
        self.stats.update_counts(out, reward)
        self.opponent.reset(out.done)
        self.reward.reset(out.done)
        self._obs.copy_(out.obs)

    def restart_episodes(self) -> None:
        """Every environment back to episode 0 of its seed, statistics zeroed (in place: a
        captured graph keeps its buffers)."""
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self.sim.reseed(self.sim.seed)
        self._obs.copy_(self.sim.reset())
        self.opponent.reset(everyone)
        self.reward.reset(everyone)
        self.stats.reset()

    @torch.no_grad()
    def restart_envs(self, env_mask: torch.Tensor) -> None:
        """Start new episodes in the masked environments between two chunks (a league gives
        them another opponent). The cut episodes count as neither finished nor lost: the last
        chunk already bootstraps them from its ``next_values``, as for a time limit."""
        with self._on_stream():
            self._obs.copy_(self.sim.reset(env_mask))
            self.opponent.reset(env_mask)
            self.reward.reset(env_mask)
            self.stats.forget(env_mask)

    @torch.no_grad()
    def rollout(self, slot: Rollout, should_stop: Callable[[], bool] | None = None) -> None:
        """Write one T-step chunk into ``slot`` (enqueued on this actor's stream on CUDA).

        The slot must be WRITING and owned by the caller; on CUDA the stream first waits for
        the learner's last read of the slot, and the slot's ``written_event`` is recorded at
        the end. ``should_stop`` is asked before every decision step (a host bool, no device
        read); when it says so the chunk is given up with :class:`ChunkInterrupted`, so a stop
        request is honoured within one decision step, however long a chunk is.
        """
        check_slot(slot, self.spec, self.actor_id)
        caller = torch.cuda.current_stream(self.device) if self.stream is not None else None
        read_event = getattr(slot, "read_event", None)
        written_event = getattr(slot, "written_event", None)
        with self._on_stream(), span(f"actor:{self.actor_id}:rollout"):
            if self.stream is not None and caller is not None:
                # Work the caller enqueued on its stream (the debug ring's magic fill, the
                # gather of the previous chunk's episode lengths) comes before this chunk.
                self.stream.wait_stream(caller)
                if read_event is not None:
                    self.stream.wait_event(read_event)
            # A slot in host memory (pinned ring) is written through a device-side staging
            # chunk and copied out once, non-blocking, instead of a blocking copy per step.
            target = slot if slot.device == self.device else self._staging_for()
            self.stats.begin_chunk()
            for t in range(self.rollout_len):
                if should_stop is not None and should_stop():
                    raise ChunkInterrupted(f"actor {self.actor_id}: stopped at step {t}")
                targets = StepTargets(target.row(t), self.stats.chunk_done[t], self.stats.chunk_lengths[t])
                if self._graph is not None:
                    self._graph.replay_into(targets)
                elif self._compiled is not None:
                    self._compiled.run_into(targets)
                else:
                    self.step_into(targets)
            target.next_values.copy_(self.policy.get_value(self._obs[:, self.side]))
            if target is not slot:
                slot.copy_(target, non_blocking=True)
            if self.stream is not None and written_event is not None:
                written_event.record(self.stream)
        self.chunks_written += 1

    async def rollout_async(self, slot: Rollout, should_stop: Callable[[], bool] | None = None) -> None:
        """:meth:`rollout` called from the event loop; it blocks the loop for the whole chunk
        (the loops run a sim actor's chunks in a thread instead, see :attr:`steps_on_event_loop`)."""
        self.rollout(slot, should_stop)

    def _staging_for(self) -> Rollout:
        if self._staging is None:
            self._staging = self.spec.allocate(self.device)
        return self._staging

    def check_errors(self) -> None:
        """Raise a deferred error at a chunk boundary (one host read each): bad actions given
        to the sim, or a :class:`ContractViolation` of the plug-ins or the policy."""
        self.sim.check_errors()
        if bool(self._violations.any()):
            found = [what for what, bad in zip(VIOLATIONS, self._violations.tolist(), strict=True) if bad]
            raise ContractViolation(f"actor {self.actor_id}, chunk {self.chunks_written - 1}: "
                                    + "; ".join(found))

    def chunk_episodes(self) -> ChunkEpisodes:
        """Outcomes and lengths of the episodes that ended in the last chunk (one host read)."""
        wins, draws, losses, lengths = self.stats.chunk_outcomes()
        return ChunkEpisodes(int(wins), int(draws), int(losses), lengths)

    def wait_started(self) -> None:
        """Nothing to wait for: the actor is ready once built."""

    def close(self) -> None:
        """Nothing to release: the sim, the replica and the plug-ins live in this process."""
