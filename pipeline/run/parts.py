"""Building the run's parts from a resolved config: learner, weights, ring, actors.

Kept apart from the loops so the async and the sync mode run the very same objects, and so an
actor can be rebuilt on fresh environments after a crash.
"""

from __future__ import annotations

import copy
import resource
from dataclasses import dataclass
from pathlib import Path

import torch

from actors.gym_actor import GymActor
from actors.protocol import Actor
from core.schema import RolloutSpec
from learner import ActionSpec, ActorCritic, PPOLearner
from monitoring import Metrics
from pipeline.config import LEAGUE, ConfigError, PipelineConfig
from pipeline.envs.choice import EnvFactory, is_sim, make_vector_env, probe
from pipeline.league.matchmaking import League
from pipeline.run.actor_process import ProcessActor
from pipeline.run.gym_memory import check_gym_memory
from pipeline.run.sim_actors import (
    make_opponent_and_reward,
    make_sim_actor,
    make_teacher,
    sim_mirror,
)
from pipeline.transport.ring import RolloutRing
from pipeline.transport.slots import RingSlot
from pipeline.transport.weights import WeightPublisher
from sim import BatchedSim, ObsLayout
from sim.device import available_memory_bytes, format_bytes

RunActor = Actor[RingSlot]
"""An experience producer writing this run's ring slots: the sim's (``SimActor`` in this process,
``ProcessActor`` for one in an actor process) or a Gymnasium env's (``GymActor``)."""


def actor_seed(base_seed: int, actor_id: int, incarnation: int) -> int:
    """Distinct, reproducible scenario seeds per actor and per restart."""
    return (base_seed * 1_000_003 + actor_id * 7919 + incarnation * 104_729) % (2**31)


@dataclass
class RunParts:
    """Everything one run steps: the learner, its weight publisher, the ring and the actors."""

    config: PipelineConfig
    device: torch.device
    layout: ObsLayout | None
    """The sim's observation layout (None for a Gymnasium env)."""
    learner: PPOLearner
    publisher: WeightPublisher
    ring: RolloutRing
    actors: list[RunActor]
    incarnations: list[int]
    """Restarts so far, per actor."""
    env_factory: EnvFactory | None = None
    """The Gymnasium env the actors run (None for the sim)."""
    metrics: Metrics | None = None
    """The run's metrics (worker pools count their restarts there)."""
    league: League | None = None
    """The self-play league (``--opponent league``), else None."""
    stop_flag: torch.Tensor | None = None
    """Set to 1 when the run stops (shared memory: actor processes read it between steps)."""

    def replica(self) -> ActorCritic:
        """A frozen copy of the learner's policy for an actor."""
        replica = copy.deepcopy(self.learner.policy).to(self.device).eval()
        for p in replica.parameters():
            p.requires_grad_(False)
        return replica

    def build_actor(self, actor_id: int, stream: torch.cuda.Stream | None = None) -> RunActor:
        """A fresh actor (new environments, replica, opponent, reward) for slot ``actor_id``
        (on ``stream`` if given: a restart keeps its predecessor's CUDA stream)."""
        cfg = self.config
        inc = self.incarnations[actor_id]
        seed = actor_seed(cfg.run.seed, actor_id, inc)
        B = cfg.actors.envs_per_actor
        if self.env_factory is not None:
            env = make_vector_env(self.env_factory, B, cfg.actors.workers_per_actor, self.metrics)
            gym_actor = GymActor(actor_id, env, cfg.actors.env, cfg.actors.rollout_len,
                                 self.replica(), seed=seed)
            gym_actor.sync_weights(self.publisher)
            return gym_actor
        assert self.layout is not None
        if cfg.actor_processes:
            return ProcessActor(actor_id, cfg, seed, self.ring, self.publisher, self.stop_flag,
                                self.league, self.layout)
        cuda_graph = cfg.run.cuda_graph and self.device.type == "cuda"
        actor = make_sim_actor(cfg, self.layout, self.device, actor_id, seed, self.replica(),
                               self.league, cuda_graph=cuda_graph, stream=stream)
        actor.sync_weights(self.publisher)
        return actor

    def close(self) -> None:
        """Close the actors' Gymnasium envs and the actor processes (none is left running)."""
        for actor in self.actors:
            actor.close()

    def restart_actor(self, actor_id: int) -> RunActor:
        """Replace a failed actor by a fresh one on new environments."""
        self.incarnations[actor_id] += 1
        # A Gymnasium env's workers, or an actor process (killed if still alive); a sim actor
        # in this process has nothing to close.
        self.actors[actor_id].close()
        # The failed actor's stream was synchronized (pipeline.run.loops.recover). Reusing it
        # keeps every actor on a stream of its own: PyTorch's pool hands out 32 per device,
        # round robin, so taking a new one per restart would sooner or later share one.
        actor = self.actors[actor_id] = self.build_actor(actor_id, stream=self.actors[actor_id].stream)
        actor.wait_started()  # an actor process's start; the others are ready once built
        return actor


def rollout_spec(config: PipelineConfig, obs_dim: int, action_dim: int,
                 action_dtype: torch.dtype) -> RolloutSpec:
    """The chunks of this run (one ring slot each)."""
    return RolloutSpec(
        rollout_len=config.actors.rollout_len,
        num_envs=config.actors.envs_per_actor,
        obs_dim=obs_dim,
        action_dim=action_dim,
        action_dtype=action_dtype,
    )


FDS_SPARE = 64
"""File descriptors left for everything but the ring (logs, sockets, the exporter, torch)."""


def check_resources(config: PipelineConfig) -> None:
    """Refuse, before allocating anything, a run whose sims, ring and learner batch would not
    fit in the device's available memory, or whose shared ring would need more file
    descriptors than the process may open (one per slot: a slot is one shared block). A
    Gymnasium env's run is sized from its spaces (``pipeline.run.gym_memory``)."""
    if not is_sim(config.actors.env):
        check_gym_memory(config)
        return
    layout = ObsLayout.from_config(config.sim)
    spec = rollout_spec(config, layout.size, ActionSpec.for_sim(config.sim).dim,
                        torch.int64 if config.sim.action_mode == "discrete" else torch.float32)
    sims = config.actors.count * BatchedSim.estimate_bytes(config.actors.envs_per_actor, config.sim)
    ring = config.ring.slots * spec.nbytes()
    # The learner's batch, its advantage/return workspace and minibatch copies: about three
    # batches' worth.
    batch = 3 * spec.nbytes(envs=config.intake.slots_per_batch * spec.num_envs)
    need = sims + ring + batch
    device = torch.device(config.run.device)
    have = available_memory_bytes(device)
    if need > have:
        raise ConfigError(
            f"this run needs about {format_bytes(need)} ({config.actors.count} sims of "
            f"{config.actors.envs_per_actor} envs {format_bytes(sims)}, ring {format_bytes(ring)}, learner batch "
            f"{format_bytes(batch)}) but {device} has {format_bytes(have)} available; lower actors.envs_per_actor, "
            "actors.count or ring.slots")
    if config.ring.placement in ("auto", "shared") and device.type == "cpu":
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and config.ring.slots + FDS_SPARE > soft:
            raise ConfigError(
                f"ring.slots={config.ring.slots} shared-memory slots need {config.ring.slots} file "
                f"descriptors plus about {FDS_SPARE}, but the limit is {soft} (ulimit -n)")


def build(config: PipelineConfig, metrics: Metrics | None = None, run_dir: Path | None = None) -> RunParts:
    """Construct every part for a resolved config (no checkpoint loaded yet); a league keeps
    its pool in ``run_dir/league`` (default: ``runs/league``, for tests and benches)."""
    device = torch.device(config.run.device)
    factory: EnvFactory | None = None
    layout: ObsLayout | None = None
    if is_sim(config.actors.env):
        layout = ObsLayout.from_config(config.sim)
        action_spec = ActionSpec.for_sim(config.sim)
        obs_dim, obs_meta = layout.size, layout.metadata()
    else:
        factory = EnvFactory(config.actors.env, dict(config.actors.env_kwargs))
        try:
            spaces = probe(factory)
            action_spec = ActionSpec.from_gym(spaces.action_space)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        obs_dim = spaces.obs_dim
        obs_meta = {"env": config.actors.env, "size": obs_dim}
    if config.ppo.policy_bias and len(config.ppo.policy_bias) != action_spec.num_logits:
        raise ConfigError(f"ppo.policy_bias has {len(config.ppo.policy_bias)} values but the policy "
                          f"head has {action_spec.num_logits} outputs ({action_spec.kind} {action_spec.nvec or action_spec.dim})")
    teacher = make_teacher(config, layout, device) if config.ppo.teacher and layout is not None else None
    learner = PPOLearner(config.ppo, obs_dim, action_spec, device=device, obs_layout=obs_meta,
                         mirror=sim_mirror(config.sim) if config.ppo.mirror and layout is not None else None,
                         teacher=teacher)
    processes = config.actor_processes
    # Actor processes read the weights from shared memory (a seqlock guards each publication).
    publisher = WeightPublisher(learner.policy, share=processes)
    spec = rollout_spec(config, obs_dim, action_spec.dim,
                        torch.float32 if action_spec.kind == "continuous" else torch.int64)
    try:
        ring = RolloutRing(spec, config.ring.slots, config.ring.placement, device, device,
                           debug=config.run.debug)
    except ValueError as exc:
        raise ConfigError(f"ring: {exc}") from None
    parts = RunParts(config, device, layout, learner, publisher, ring, [], [0] * config.actors.count,
                     env_factory=factory, metrics=metrics,
                     stop_flag=torch.zeros(1, dtype=torch.uint8).share_memory_() if processes else None)
    if config.actors.opponent == LEAGUE and layout is not None:
        league_dir = (run_dir if run_dir is not None else Path("runs")) / "league"
        parts.league = League(config.league, league_dir, config.run.seed, parts.replica)
    publisher.publish(learner.policy, learner.policy_version)
    if processes and layout is not None and parts.league is None:
        # Refuse a bad opponent or reward here, in one line, rather than in every child.
        make_opponent_and_reward(config, layout, device, config.run.seed, None)
    try:
        for i in range(config.actors.count):
            parts.actors.append(parts.build_actor(i))  # appended one by one: close() finds them
        for actor in parts.actors:
            actor.wait_started()  # actor processes start side by side, then are awaited
    except BaseException:
        parts.close()
        raise
    return parts
