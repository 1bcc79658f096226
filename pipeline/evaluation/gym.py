"""Evaluating a policy on a Gymnasium env: mean episode return with a confidence interval.

The envs step in worker processes (``actors/workers/``, as in training), so an env that crashes
(a segfault, ``sys.exit``) or hangs ends the evaluation with an :class:`EvaluationError`
instead of the process that evaluates. No worker is restarted: a made-up truncated episode
would change the returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from actors.workers.process_vec_env import EnvError, ProcessVecEnv, WorkerCrashError
from learner.checkpoint import load_policy
from pipeline.envs.choice import EnvFactory

EVALUATION_ENVS = 8
"""Envs stepped side by side (fewer when fewer episodes are asked for)."""


class EvaluationError(RuntimeError):
    """The env failed during the evaluation (raised, crashed or hung in its worker); one line."""


@dataclass(frozen=True)
class ReturnStats:
    """Returns of ``episodes`` finished episodes."""

    env: str
    episodes: int
    mean: float
    ci_low: float
    ci_high: float
    """95 % interval of the mean (normal approximation; exact enough from about 30 episodes)."""
    mean_length: float

    def line(self) -> str:
        """One line for the run's summary."""
        return (f"{self.env}: mean return {self.mean:.1f} [95% CI {self.ci_low:.1f}, {self.ci_high:.1f}] "
                f"over {self.episodes} episodes (mean length {self.mean_length:.0f})")


def _start_envs(factory: EnvFactory, num_envs: int, workers: int) -> ProcessVecEnv:
    """``num_envs`` envs in ``workers`` worker processes (a divisor of ``num_envs``: fewer
    when ``workers`` is not one), none of them restarted."""
    workers = max(d for d in range(1, max(1, min(workers, num_envs)) + 1) if num_envs % d == 0)
    try:
        return ProcessVecEnv(factory, num_envs, num_workers=workers, max_restarts=0)
    except (RuntimeError, ValueError) as exc:  # EnvError is a RuntimeError
        raise EvaluationError(f"env {factory.spec}: the evaluation's env workers did not start: "
                              f"{str(exc).splitlines()[0]}") from None


@torch.no_grad()
def evaluate_returns(checkpoint: str | Path, factory: EnvFactory, episodes: int, seed: int = 0,
                     deterministic: bool = True, num_envs: int = EVALUATION_ENVS,
                     workers: int = 1) -> ReturnStats:
    """Play ``episodes`` episodes of ``factory``'s env with the checkpoint's policy (its most
    likely action when ``deterministic``) and summarise the returns. The envs step in
    ``workers`` worker processes; an env that raises, crashes or hangs there is an
    :class:`EvaluationError`."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    policy = load_policy(checkpoint).eval()
    n = min(num_envs, episodes)
    env = _start_envs(factory, n, workers)
    discrete = isinstance(env.single_action_space, gym.spaces.Discrete)
    space = env.single_action_space
    low = high = None
    if isinstance(space, gym.spaces.Box):
        low, high = space.low, space.high
    returns: list[float] = []
    lengths: list[int] = []
    try:
        obs, _ = env.reset(seed=seed)
        running = np.zeros(n)
        steps = np.zeros(n, dtype=np.int64)
        while len(returns) < episodes:
            x = torch.as_tensor(np.asarray(obs), dtype=torch.float32).reshape(n, -1)
            actions, _, _ = policy.act(x, deterministic=deterministic)
            a = actions[:, 0].numpy() if discrete else actions.numpy()
            if low is not None:
                a = np.clip(a, low, high)
            obs, reward, terminated, truncated, _ = env.step(a)
            running += reward
            steps += 1
            for i in np.flatnonzero(np.logical_or(terminated, truncated)):
                if len(returns) < episodes:
                    returns.append(float(running[i]))
                    lengths.append(int(steps[i]))
                running[i], steps[i] = 0.0, 0
    except (EnvError, WorkerCrashError) as exc:
        raise EvaluationError(f"env {factory.spec} failed during the evaluation after "
                              f"{len(returns)} of {episodes} episodes: {str(exc).splitlines()[0]}") from None
    finally:
        env.close()
    r = np.asarray(returns)
    half = 1.96 * float(r.std(ddof=1)) / math.sqrt(len(r)) if len(r) > 1 else float("nan")
    return ReturnStats(factory.spec, len(r), float(r.mean()), float(r.mean()) - half,
                       float(r.mean()) + half, float(np.mean(lengths)))
