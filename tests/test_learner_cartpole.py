"""End-to-end: a short PPO run on Gymnasium CartPole-v1 beats the random policy clearly."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from learner import PPOConfig
from learner.gym_loop import train_gym


def _random_policy_mean_return(episodes: int = 50, seed: int = 0) -> float:
    env = gym.make("CartPole-v1")
    env.action_space.seed(seed)
    returns = []
    for i in range(episodes):
        env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def test_short_cartpole_run_improves_clearly_over_random():
    torch.set_num_threads(1)
    baseline = _random_policy_mean_return()
    num_envs, num_steps, total = 4, 128, 16_384
    cfg = PPOConfig(hidden_sizes=(64, 64), learning_rate=2.5e-4, total_updates=total // (num_envs * num_steps))
    result = train_gym("CartPole-v1", cfg, total, num_envs, num_steps, seed=0)
    trained = result.mean_return(last=20)
    assert result.env_steps == total
    assert 10.0 < baseline < 40.0  # the random policy's well-known ~22
    assert trained > 4.0 * baseline, f"trained mean return {trained:.1f} vs random {baseline:.1f}"
