"""A plain synchronous PPO loop over a Gymnasium vector environment.

Collect ``num_steps`` transitions from ``num_envs`` environments with the current policy, update,
repeat. It is the reference loop that shows the learner learns on its own, before any pipeline;
training reports through a ``progress_fn`` callback so metrics stay out of the algorithm.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from learner.batch import RolloutBatch
from learner.ppo import PPOLearner
from learner.ppo_config import PPOConfig
from learner.spaces import ActionSpec


@dataclass
class GymTrainResult:
    """What :func:`train_gym` returns."""

    learner: PPOLearner
    """The trained learner."""
    episode_returns: list[float] = field(default_factory=list)
    """Undiscounted return of every completed episode, in completion order."""
    episode_end_steps: list[int] = field(default_factory=list)
    """Global environment step at which each episode completed."""
    env_steps: int = 0
    """Environment steps taken (all environments together)."""
    wall_s: float = 0.0
    """Wall-clock time of the whole run."""

    def mean_return(self, last: int = 100) -> float:
        """Mean return of the last ``last`` completed episodes (NaN if none)."""
        tail = self.episode_returns[-last:]
        return float(np.mean(tail)) if tail else float("nan")


def make_vector_env(env_id: str, num_envs: int, seed: int, **env_kwargs: Any) -> gym.vector.VectorEnv:
    """A ``SyncVectorEnv`` that resets finished environments within the same step (the final
    observation is reported in ``info["final_obs"]``)."""
    env = gym.vector.SyncVectorEnv(
        [lambda: gym.make(env_id, **env_kwargs) for _ in range(num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    env.reset(seed=seed)
    return env


def train_gym(env_id: str, config: PPOConfig, total_steps: int, num_envs: int = 4, num_steps: int = 128,
              seed: int = 0, device: str = "cpu",
              progress_fn: Callable[[int, dict[str, float], GymTrainResult], None] | None = None,
              **env_kwargs: Any) -> GymTrainResult:
    """Train PPO on Gymnasium ``env_id`` for ``total_steps`` environment steps.

    ``config.total_updates`` should equal ``total_steps // (num_envs * num_steps)`` for the
    learning-rate schedule to reach 0 at the end. ``progress_fn(update_index, stats, result)`` is
    called after every update.
    """
    if total_steps < num_envs * num_steps:
        raise ValueError(f"total_steps ({total_steps}) must be >= num_envs * num_steps ({num_envs * num_steps})")
    env = make_vector_env(env_id, num_envs, seed, **env_kwargs)
    obs_space = env.single_observation_space
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(f"train_gym needs a 1-D Box observation space, got {obs_space}")
    spec = ActionSpec.from_gym(env.single_action_space)
    obs_dim = int(obs_space.shape[0])
    dev = torch.device(device)
    learner = PPOLearner(config, obs_dim, spec, device=dev)
    result = GymTrainResult(learner)
    num_updates = total_steps // (num_envs * num_steps)

    t_, b_ = num_steps, num_envs
    buf = RolloutBatch(
        obs=torch.zeros(t_, b_, obs_dim, device=dev),
        actions=torch.zeros(t_, b_, spec.dim, device=dev,
                            dtype=torch.int64 if spec.is_discrete else torch.float32),
        log_probs=torch.zeros(t_, b_, device=dev), values=torch.zeros(t_, b_, device=dev),
        rewards=torch.zeros(t_, b_, device=dev),
        terminated=torch.zeros(t_, b_, device=dev, dtype=torch.bool),
        truncated=torch.zeros(t_, b_, device=dev, dtype=torch.bool),
        bootstrap_values=torch.zeros(t_, b_, device=dev), next_values=torch.zeros(b_, device=dev),
        policy_versions=torch.zeros(b_, device=dev, dtype=torch.int64),
    )
    obs_np, _ = env.reset(seed=seed)
    episode_return = np.zeros(num_envs)
    torch.manual_seed(seed)
    start = time.perf_counter()
    for update in range(num_updates):
        buf.policy_versions.fill_(learner.policy_version)
        for t in range(num_steps):
            obs = torch.as_tensor(obs_np, dtype=torch.float32, device=dev)
            actions, log_probs, values = learner.policy.act(obs)
            env_actions = actions.cpu().numpy()
            if spec.kind == "discrete":
                env_actions = env_actions[:, 0]
            obs_np, reward, terminated, truncated, info = env.step(env_actions)
            buf.obs[t] = obs
            buf.actions[t] = actions
            buf.log_probs[t] = log_probs
            buf.values[t] = values
            buf.rewards[t] = torch.as_tensor(reward, dtype=torch.float32, device=dev)
            buf.terminated[t] = torch.as_tensor(terminated, device=dev)
            buf.truncated[t] = torch.as_tensor(truncated, device=dev)
            if truncated.any():
                final = np.stack([info["final_obs"][i] if truncated[i] else obs_np[i] for i in range(num_envs)])
                buf.bootstrap_values[t] = learner.policy.get_value(
                    torch.as_tensor(final, dtype=torch.float32, device=dev))
            else:
                buf.bootstrap_values[t] = 0.0
            episode_return += reward
            for i in np.flatnonzero(terminated | truncated):
                result.episode_returns.append(float(episode_return[i]))
                result.episode_end_steps.append((update * num_steps + t + 1) * num_envs)
                episode_return[i] = 0.0
        buf.next_values.copy_(learner.policy.get_value(torch.as_tensor(obs_np, dtype=torch.float32, device=dev)))
        stats = learner.update(buf)
        result.env_steps = (update + 1) * num_steps * num_envs
        if progress_fn is not None:
            progress_fn(update, stats, result)
    result.wall_s = time.perf_counter() - start
    env.close()
    return result


def random_policy_return(env_id: str, episodes: int, seed: int = 0) -> float:
    """Mean return of uniformly random actions over ``episodes`` seeded episodes of ``env_id``:
    the baseline a learning curve is compared against in the same run."""
    env = gym.make(env_id)
    try:
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
    finally:
        env.close()
    return float(np.mean(returns))
