"""Which environment a run trains on: the batched sim (``midrange``) or any Gymnasium env.

``--env gym:CartPole-v1`` names a registered Gymnasium id, ``--env package.module:factory`` a
callable returning a ``gymnasium.Env``; ``--env-kwargs`` are passed to either. The spaces are
probed once, in the launcher, so a wrong id, a factory that raises or a space the learner cannot
handle stops the launch at once with the env and the space named.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from actors.gym_actor import check_spaces
from monitoring import Metrics
from pipeline.envs.factory import EnvFactory

__all__ = ["SIM_ENV", "EnvFactory", "EnvSpaces", "check_env_spec", "default_workers", "is_sim",
           "make_vector_env", "measure_step_seconds", "probe"]

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
                         f"{' '.join(str(exc).split())}") from None


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


WORKER_STEP_COST_S = 100e-6
"""An env step that costs at least this much is stepped in worker processes by default.
bench/workers.py (bench/RESULTS.md) puts a worker round trip at about 20 µs of extra CPU per
CartPole step at 16 envs (10 µs per step in-process): an env that cheap runs fastest in the
actor's own process, while a 0.5 ms env runs 1.6–1.75× faster in two workers than in one
process."""


def measure_step_seconds(factory: EnvFactory, budget_s: float = 0.2, max_steps: int = 2000) -> float:
    """Seconds one ``step`` of the env takes with random actions (episodes reset as they end),
    timed over at most ``budget_s`` seconds or ``max_steps`` steps. A failure to make or step
    the env, or a space the learner cannot handle, is a ``ValueError`` naming it."""
    env = _make(factory)
    try:
        check_spaces(factory.spec, env.observation_space, env.action_space)
    except Exception:
        env.close()
        raise
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        steps = 0
        start = time.perf_counter()
        elapsed = 0.0
        while steps < max_steps and elapsed < budget_s:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
            steps += 1
            elapsed = time.perf_counter() - start
        return elapsed / max(steps, 1)
    except Exception as exc:
        raise ValueError(f"env {factory.spec}: stepping it with random actions failed: "
                         f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None
    finally:
        env.close()


def default_workers(step_seconds: float, envs_per_actor: int, actors: int, cores: int) -> int:
    """Worker processes per actor when the user chose none: 0 (the actor's own process) for an
    env cheaper than :data:`WORKER_STEP_COST_S` a step, else the cores shared between the
    actors, at least one each and never more than the actor's envs."""
    if step_seconds < WORKER_STEP_COST_S:
        return 0
    return max(1, min(envs_per_actor, cores // max(actors, 1)))
