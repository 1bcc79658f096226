"""Building the run's parts from a resolved config: learner, weights, ring, actors.

Kept apart from the loops so the async and the sync mode run the very same objects, and so an
actor can be rebuilt on fresh environments after a crash.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch

from actors.actor import SimActor
from agents.registry import make_agent
from learner import ActionSpec, PPOConfig, PPOLearner
from pipeline.config import ConfigError, PipelineConfig
from pipeline.ring import RolloutRing, SlotSpec
from pipeline.weights import WeightPublisher
from sim import ObsLayout


def pick_device(requested: str) -> str:
    """``auto`` → ``cuda`` when present else ``cpu``; an explicit CUDA device must exist."""
    if requested == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"run.device is {requested!r} but no CUDA device is available")
        index = int(requested[5:]) if ":" in requested else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"run.device is {requested!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
        return f"cuda:{index}"
    return requested


def chunks_for(config: PipelineConfig) -> int:
    """Chunks needed to produce ``run.total_steps`` agent-steps (rounded up)."""
    return math.ceil(config.run.total_steps / config.samples_per_chunk)


def make_ppo_config(config: PipelineConfig) -> PPOConfig:
    """``[ppo]`` overrides on top of defaults sized to this run (schedule length, seed)."""
    samples_per_batch = config.samples_per_chunk * config.learner.slots_per_batch
    updates = max(math.ceil(config.run.total_steps / samples_per_batch), 1)
    base: dict[str, Any] = {"total_updates": updates, "seed": config.run.seed}
    if config.run.device == "cpu":
        # Small, quick updates on a laptop CPU: the sample budget is what limits learning there.
        base.update(hidden_sizes=(64, 64), update_epochs=3, num_minibatches=2, learning_rate=1e-3)
    base.update(config.ppo)
    try:
        ppo = PPOConfig.from_dict(base)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"ppo: {exc}") from None
    if samples_per_batch % ppo.num_minibatches:
        raise ConfigError(
            f"ppo.num_minibatches ({ppo.num_minibatches}) must divide the batch of "
            f"{samples_per_batch} samples (rollout_len × envs_per_actor × slots_per_batch)"
        )
    return ppo


def make_reward(spec: str, device: torch.device | str, layout: ObsLayout) -> Any:
    """A reward plug-in from its spec (``rewards.make_reward``)."""
    from rewards import make_reward as _make_reward

    return _make_reward(spec, device, layout=layout)


def actor_seed(base_seed: int, actor_id: int, incarnation: int) -> int:
    """Distinct, reproducible scenario seeds per actor and per restart."""
    return (base_seed * 1_000_003 + actor_id * 7919 + incarnation * 104_729) % (2**31)


@dataclass
class Components:
    """Everything one run steps: the learner, its weight publisher, the ring and the actors."""

    config: PipelineConfig
    device: torch.device
    layout: ObsLayout
    learner: PPOLearner
    publisher: WeightPublisher
    ring: RolloutRing
    actors: list[SimActor]
    incarnations: list[int]
    """Restarts so far, per actor."""

    def build_actor(self, actor_id: int, stream: torch.cuda.Stream | None = None) -> SimActor:
        """A fresh actor (new environments, replica, opponent, reward) for slot ``actor_id``
        (on ``stream`` if given: a restart keeps its predecessor's CUDA stream)."""
        cfg = self.config
        inc = self.incarnations[actor_id]
        seed = actor_seed(cfg.run.seed, actor_id, inc)
        B = cfg.actors.envs_per_actor
        try:
            opponent = make_agent(
                cfg.actors.opponent, B, self.layout, self.device, seed=seed,
                action_mode=cfg.sim.action_mode, sim_config=cfg.sim,
            ).eval()
            reward = make_reward(cfg.actors.reward, self.device, self.layout)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        replica = copy.deepcopy(self.learner.policy).to(self.device).eval()
        for p in replica.parameters():
            p.requires_grad_(False)
        fail_at = cfg.run.fail_actor_at_chunk if actor_id == 0 and inc < cfg.run.fail_actor_times else -1
        actor = SimActor(
            actor_id, cfg.sim, B, cfg.actors.rollout_len, replica, opponent, reward,
            device=self.device, seed=seed, learning_side=cfg.actors.learning_side,
            cuda_graph=cfg.run.cuda_graph and self.device.type == "cuda",
            compile_sim=bool(cfg.run.compile_sim), fail_at_chunk=fail_at, stream=stream,
        )
        actor.sync_weights(self.publisher)
        return actor

    def restart_actor(self, actor_id: int) -> SimActor:
        """Replace a failed actor by a fresh one on new environments."""
        self.incarnations[actor_id] += 1
        # The failed actor's stream was synchronized (Orchestrator.actor_failed). Reusing it
        # keeps every actor on a stream of its own: PyTorch's pool hands out 32 per device,
        # round robin, so taking a new one per restart would sooner or later share one.
        self.actors[actor_id] = self.build_actor(actor_id, stream=getattr(self.actors[actor_id], "stream", None))
        return self.actors[actor_id]


def build(config: PipelineConfig) -> Components:
    """Construct every part for a resolved config (no checkpoint loaded yet)."""
    device = torch.device(config.run.device)
    layout = ObsLayout.from_config(config.sim)
    action_spec = ActionSpec.for_sim(config.sim)
    learner = PPOLearner(make_ppo_config(config), layout.size, action_spec, device=device,
                         obs_layout=layout.metadata())
    publisher = WeightPublisher(learner.policy)
    spec = SlotSpec(
        rollout_len=config.actors.rollout_len,
        num_envs=config.actors.envs_per_actor,
        obs_dim=layout.size,
        action_dim=action_spec.dim,
        action_dtype=torch.int64 if config.sim.action_mode == "discrete" else torch.float32,
    )
    try:
        ring = RolloutRing(spec, config.ring.slots, config.ring.placement, device, device,
                           debug=config.run.debug)
    except ValueError as exc:
        raise ConfigError(f"ring: {exc}") from None
    parts = Components(config, device, layout, learner, publisher, ring, [], [0] * config.actors.count)
    publisher.publish(learner.policy, learner.policy_version)
    parts.actors = [parts.build_actor(i) for i in range(config.actors.count)]
    return parts
