"""Evaluating a policy on a Gymnasium env: mean episode return with a confidence interval."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from learner.checkpoint import load_policy
from pipeline.envs.choice import EnvFactory


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


@torch.no_grad()
def evaluate_returns(checkpoint: str | Path, factory: EnvFactory, episodes: int, seed: int = 0,
                     deterministic: bool = True, num_envs: int = 8) -> ReturnStats:
    """Play ``episodes`` episodes of ``factory``'s env with the checkpoint's policy (its most
    likely action when ``deterministic``) and summarise the returns."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    policy = load_policy(checkpoint).eval()
    n = min(num_envs, episodes)
    env = gym.vector.SyncVectorEnv([factory] * n, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
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
    finally:
        env.close()
    r = np.asarray(returns)
    half = 1.96 * float(r.std(ddof=1)) / math.sqrt(len(r)) if len(r) > 1 else float("nan")
    return ReturnStats(factory.spec, len(r), float(r.mean()), float(r.mean()) - half,
                       float(r.mean()) + half, float(np.mean(lengths)))
