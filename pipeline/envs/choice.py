"""Which environment a run trains on: the batched sim (``midrange``) or any Gymnasium env.

``--env gym:CartPole-v1`` names a registered Gymnasium id, ``--env package.module:factory`` a
callable returning a ``gymnasium.Env``; ``--env-kwargs`` are passed to either. The spaces are
probed once, in the launcher, so a wrong id, a factory that raises or a space the learner cannot
handle stops the launch at once with the env and the space named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from actors.gym_actor import check_spaces
from core.command import squeezed
from monitoring import Metrics
from pipeline.envs.factory import EnvFactory

__all__ = ["SIM_ENV", "EnvFactory", "EnvSpaces", "check_env_spec", "default_workers", "is_sim",
           "make_vector_env", "probe"]

SIM_ENV = "midrange"


def is_sim(spec: str) -> bool:
    """Whether ``spec`` names the batched air-combat sim."""
    return spec == SIM_ENV


def check_env_spec(spec: str) -> None:
    """Refuse a malformed spec (before anything is built)."""
    if is_sim(spec):
        return
    if spec.startswith("gym:"):
        if not spec[4:]:
            raise ValueError("actors.env 'gym:' needs an id, e.g. gym:CartPole-v1")
        return
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"actors.env must be 'midrange', 'gym:ID' or 'package.module:factory', "
                         f"got {spec!r}")


@dataclass(frozen=True)
class EnvSpaces:
    """What the learner and the ring need to know of an env."""

    observation_space: Any
    action_space: Any
    obs_dim: int
    action_dim: int


def _make(factory: EnvFactory) -> gym.Env[Any, Any]:
    try:
        return factory()
    except ValueError:
        raise
    except Exception as exc:  # gymnasium raises several kinds for a bad id or kwargs
        raise ValueError(f"env {factory.spec}: cannot be made: {type(exc).__name__}: "
                         f"{squeezed(exc)}") from None


def probe(factory: EnvFactory) -> EnvSpaces:
    """Make one env, read and check its spaces, close it. Any failure is a ``ValueError``
    naming the env (and the space)."""
    env = _make(factory)
    try:
        obs_dim, action_dim, _ = check_spaces(factory.spec, env.observation_space, env.action_space)
        return EnvSpaces(env.observation_space, env.action_space, obs_dim, action_dim)
    finally:
        env.close()


def make_vector_env(factory: EnvFactory, num_envs: int, workers: int,
                    metrics: Metrics | None = None) -> gym.vector.VectorEnv:
    """``num_envs`` copies of the env resetting in the same step: in ``workers`` worker
    processes, or in this process when ``workers`` is 0."""
    if workers > 0:
        from actors.workers.process_vec_env import ProcessVecEnv

        return ProcessVecEnv(factory, num_envs, num_workers=workers, metrics=metrics)
    return gym.vector.SyncVectorEnv([factory] * num_envs,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


GYMNASIUM_ENVS_MODULE = "gymnasium.envs."
"""Registered ids whose entry point lies under this module are Gymnasium's own envs (classic
control, toy text, Box2D, MuJoCo)."""


def is_gymnasium_own_env(spec: str) -> bool:
    """Whether ``spec`` is ``gym:ID`` of an env Gymnasium itself ships (its registered entry
    point is in ``gymnasium.envs``); False for any other id, an unknown one or a factory."""
    if not spec.startswith("gym:"):
        return False
    try:
        entry_point = gym.spec(spec[4:]).entry_point
    except Exception:  # an unknown id: the probe names it
        return False
    module = entry_point if isinstance(entry_point, str) else getattr(entry_point, "__module__", "")
    return module.startswith(GYMNASIUM_ENVS_MODULE)


def default_workers(spec: str, envs_per_actor: int, actors: int, cores: int) -> int:
    """Worker processes per actor when the user chose none, by a fixed rule (never by timing,
    so a run's config does not depend on the machine's load): 0 (the actor's own process) for
    Gymnasium's own envs, cheap and trusted (bench/workers.py, bench/RESULTS.md: CartPole runs
    fastest in-process); for any other env, whose code may be slow or crash, the cores shared
    between the actors, at least one each: the largest divisor of ``envs_per_actor`` not above
    ``cores // actors`` (a worker hosts an equal share of the actor's envs)."""
    if is_gymnasium_own_env(spec):
        return 0
    share = max(1, cores // max(actors, 1))
    return max(d for d in range(1, min(share, envs_per_actor) + 1) if envs_per_actor % d == 0)
