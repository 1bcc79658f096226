"""End-to-end: a short PPO run on Gymnasium CartPole-v1 beats the random policy clearly."""

from __future__ import annotations

import pytest
import torch

from learner import PPOConfig
from learner.gym_loop import random_policy_return, train_gym


@pytest.mark.slow
def test_short_cartpole_run_improves_clearly_over_random():
    torch.set_num_threads(1)
    baseline = random_policy_return("CartPole-v1", episodes=50, seed=0)
    num_envs, num_steps, total = 4, 128, 16_384
    cfg = PPOConfig(hidden_sizes=(64, 64), learning_rate=2.5e-4, total_updates=total // (num_envs * num_steps))
    result = train_gym("CartPole-v1", cfg, total, num_envs, num_steps, seed=0)
    trained = result.mean_return(last=20)
    assert result.env_steps == total
    assert 10.0 < baseline < 40.0  # the random policy's well-known ~22
    assert trained > 4.0 * baseline, f"trained mean return {trained:.1f} vs random {baseline:.1f}"
