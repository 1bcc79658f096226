"""The memory a run on a Gymnasium env needs, checked before anything is written or allocated.

The sizes follow from the env's spaces (one env is made to read them): the policy's networks
(the learner's weights, gradients and Adam moments, the weight publisher, one replica per
actor, the evaluation's copy), the envs' observations, the ring's slots and the learner's
batch. The ring's slots (``shared`` placement) and the env workers' blocks are shared-memory
segments, so they must also fit in ``/dev/shm``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import numpy as np
import torch

from core.schema import RolloutSpec
from learner import ActionSpec, ActorCritic
from pipeline.config import ConfigError, PipelineConfig
from pipeline.envs.choice import EnvFactory, EnvSpaces, probe
from pipeline.evaluation.gym import EVALUATION_ENVS
from pipeline.transport.slots import choose_placement
from sim.device import available_memory_bytes, format_bytes

SHARED_MEMORY_DIR = "/dev/shm"
"""Where Linux keeps shared-memory segments (a tmpfs of its own size, in RAM)."""
LEARNER_NETWORK_COPIES = 4
"""The learner's weights, their gradients and Adam's two moments."""
LEARNER_BATCH_COPIES = 3
"""The learner's batch, its advantage/return workspace and minibatch copies."""
OBS_COPIES_PER_ENV = 4
"""Observations held per env outside the ring: the env's own, the vector env's batch row, the
copy it returns and the actor's float32 tensor."""
OBS_COPIES_PER_WORKER_ENV = 2
"""Observation and final observation of each env in its worker's shared block."""


@dataclass(frozen=True)
class GymMemoryNeed:
    """Bytes a Gymnasium run holds at once, by part; ``shared`` is the part in shared memory."""

    observation: int
    """One env's observation (the unit the envs' part is counted in)."""
    networks: int
    envs: int
    ring: int
    batch: int
    shared: int

    @property
    def total(self) -> int:
        """All of it (the shared segments are RAM too)."""
        return self.networks + self.envs + self.ring + self.batch


def network_bytes(config: PipelineConfig, spaces: EnvSpaces) -> int:
    """Bytes of one copy of the policy's parameters and buffers (built on the meta device:
    sized, not allocated)."""
    ppo = config.ppo
    with torch.device("meta"):
        net = ActorCritic(spaces.obs_dim, ActionSpec.from_gym(spaces.action_space), ppo.hidden_sizes,
                          ppo.activation, ppo.normalize_obs, ppo.obs_norm_clip)
    return sum(t.numel() * t.element_size() for t in (*net.parameters(), *net.buffers()))


def gym_memory_need(config: PipelineConfig, spaces: EnvSpaces) -> GymMemoryNeed:
    """What ``config`` needs on an env with ``spaces``."""
    actors, envs = config.actors.count, config.actors.envs_per_actor
    obs = spaces.observation_space
    obs_bytes = int(np.prod(obs.shape, dtype=np.int64)) * np.dtype(obs.dtype).itemsize
    action_spec = ActionSpec.from_gym(spaces.action_space)
    eval_envs = min(EVALUATION_ENVS, config.run.eval_episodes)
    copies = LEARNER_NETWORK_COPIES + 1 + actors + (1 if eval_envs else 0)
    worker_envs = actors * envs * (config.actors.workers_per_actor > 0) + eval_envs
    blocks = worker_envs * OBS_COPIES_PER_WORKER_ENV * obs_bytes
    spec = RolloutSpec(config.actors.rollout_len, envs, spaces.obs_dim, spaces.action_dim,
                       action_dtype=torch.float32 if action_spec.kind == "continuous" else torch.int64)
    ring = config.ring.slots * spec.nbytes()
    try:
        shared_ring = choose_placement(config.ring.placement, torch.device("cpu"), torch.device("cpu")) == "shared"
    except ValueError:
        shared_ring = False  # the ring's own check names the placement
    return GymMemoryNeed(
        observation=obs_bytes,
        networks=copies * network_bytes(config, spaces),
        envs=(actors * envs + eval_envs) * OBS_COPIES_PER_ENV * obs_bytes + blocks,
        ring=ring,
        batch=LEARNER_BATCH_COPIES * spec.nbytes(envs=config.intake.slots_per_batch * envs),
        shared=blocks + (ring if shared_ring else 0),
    )


def shared_memory_free() -> int | None:
    """Free bytes in :data:`SHARED_MEMORY_DIR`; None where there is none (not Linux)."""
    if not os.path.isdir(SHARED_MEMORY_DIR):
        return None
    return shutil.disk_usage(SHARED_MEMORY_DIR).free


def check_fits(need: GymMemoryNeed, config: PipelineConfig, available: int, shared_free: int | None) -> None:
    """Refuse, in one line naming the parts and what to lower, a need above ``available``
    bytes of RAM or shared segments above ``shared_free`` bytes of ``/dev/shm``."""
    sizes = (f"{config.actors.count} actors × {config.actors.envs_per_actor} envs, observations of "
             f"{format_bytes(need.observation)}")
    lower = ("lower actors.envs_per_actor, actors.rollout_len, actors.count, ring.slots or "
             "intake.slots_per_batch")
    if need.total > available:
        raise ConfigError(
            f"this run needs about {format_bytes(need.total)} ({sizes}: networks "
            f"{format_bytes(need.networks)}, envs {format_bytes(need.envs)}, ring "
            f"{format_bytes(need.ring)}, learner batch {format_bytes(need.batch)}) but cpu has "
            f"{format_bytes(available)} available; {lower}")
    if shared_free is not None and need.shared > shared_free:
        raise ConfigError(
            f"this run's shared-memory segments (the ring's slots and the env workers' blocks; "
            f"{sizes}) need about {format_bytes(need.shared)} but {SHARED_MEMORY_DIR} has "
            f"{format_bytes(shared_free)} free; {lower}")


def check_gym_memory(config: PipelineConfig) -> None:
    """Make one env to read its spaces (a bad env or space is refused here, naming it) and
    refuse a run that would not fit in the available RAM or in ``/dev/shm``."""
    try:
        spaces = probe(EnvFactory(config.actors.env, dict(config.actors.env_kwargs)))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    check_fits(gym_memory_need(config, spaces), config, available_memory_bytes(torch.device("cpu")),
               shared_memory_free())
