"""Shared by the export tests: checkpoints whose observation normalization matters, observations
recorded by flying a checkpoint's policy (in the sim and in a Gymnasium env), and the checks that
an exported file acts as the PyTorch policy does on them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import load_policy, save_checkpoint
from learner.network import ActorCritic
from pipeline.config.specs import build_agent, load_checkpoint_agent
from pipeline.run.sim_actors import sim_mirror
from sim import BatchedSim, SimConfig
from sim.layout import ObsLayout

DECISIVE_GAP = 1e-4
"""Logits closer than this are a tie that rounding may break either way (onnxruntime's matrix
products round differently from PyTorch's); elsewhere the actions must be equal."""
HEAD_TOLERANCE = 1e-5
"""How far an exported head output (logits, means) may be from PyTorch's: rounding only."""


def _sharpen(learner: PPOLearner) -> None:
    """Scale the policy output layer up (a fresh one is initialized near zero, every choice
    almost equally likely) so that the choices differ from observation to observation."""
    with torch.no_grad():
        learner.policy.actor[-1].weight.mul_(100.0)


def sim_observations(sim: SimConfig, red: str, blue: str, num_envs: int, steps: int, seed: int,
                     red_agent: Any = None) -> torch.Tensor:
    """Both sides' observations ``[num_envs * steps * 2, D]`` of ``steps`` decision steps of
    ``red`` against ``blue`` (agent specs; ``red_agent`` an agent built already)."""
    layout = ObsLayout.from_config(sim)
    env = BatchedSim(num_envs, sim, backend="torch", seed=seed)
    agents = [red_agent or build_agent(red, num_envs, layout, action_mode=sim.action_mode, sim_config=sim),
              build_agent(blue, num_envs, layout, action_mode=sim.action_mode, sim_config=sim)]
    obs = env.reset()
    everyone = torch.ones(num_envs, dtype=torch.bool)
    for agent in agents:
        agent.reset(everyone)
    seen = []
    for _ in range(steps):
        seen.append(obs.clone())
        out = env.step(torch.stack([agents[0].act(obs[:, 0]), agents[1].act(obs[:, 1])], dim=1))
        for agent in agents:
            agent.reset(out.done)
        obs = out.obs
    return torch.cat(seen).reshape(-1, layout.size)


def sim_checkpoint(directory: Path, sim: SimConfig, agent_steps: int = 4096, mirror: bool = False) -> Path:
    """A checkpoint of a sim policy with normalization statistics from real fights (scripted
    ``shooter`` against ``crank``), its choices spread out (``mirror``: equivariant under the
    arena's mirror image, ``ppo.mirror``); returns the checkpoints folder."""
    torch.manual_seed(0)
    layout = ObsLayout.from_config(sim)
    spec = ActionSpec.for_sim(sim)
    learner = PPOLearner(PPOConfig(hidden_sizes=(32, 32), mirror=mirror), layout.size, spec,
                         obs_layout=layout.metadata(), mirror=sim_mirror(sim) if mirror else None)
    learner.policy.update_obs_norm(sim_observations(sim, "shooter", "crank", 8, 30, seed=11))
    _sharpen(learner)
    learner.policy_version = 7
    save_checkpoint(directory, learner, {"agent_steps": agent_steps, "config": {"sim": sim.to_dict()}})
    return directory


def fly_sim_policy(checkpoint: Path, sim: SimConfig, num_envs: int = 8, steps: int = 25) -> torch.Tensor:
    """Observations of both sides while the checkpoint's policy (its mode, loaded as a sim agent
    is) flies red against ``shooter``: ``[num_envs * steps * 2, D]``."""
    layout = ObsLayout.from_config(sim)
    red = load_checkpoint_agent(str(checkpoint), num_envs, layout, deterministic=True, sim_config=sim)
    return sim_observations(sim, "", "shooter", num_envs, steps, seed=5, red_agent=red)


def gym_checkpoint(directory: Path, env_id: str = "CartPole-v1", agent_steps: int = 2048, **ppo: Any) -> Path:
    """A checkpoint of a policy for the Gymnasium env ``env_id`` with normalization statistics
    from random play (``ppo``: more ``PPOConfig`` fields, e.g. ``normalize_obs``,
    ``obs_norm_clip``)."""
    torch.manual_seed(0)
    env = gym.make(env_id)
    obs_dim = int(np.prod(env.observation_space.shape))
    learner = PPOLearner(PPOConfig(hidden_sizes=(16,), **ppo), obs_dim, ActionSpec.from_gym(env.action_space),
                         obs_layout={"env": f"gym:{env_id}", "size": obs_dim})
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    seen = []
    for _ in range(500):
        seen.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    learner.policy.update_obs_norm(torch.as_tensor(np.array(seen), dtype=torch.float32))
    _sharpen(learner)
    save_checkpoint(directory, learner, {"agent_steps": agent_steps,
                                         "config": {"actors": {"env": f"gym:{env_id}", "env_kwargs": {}}}})
    return directory


def fly_gym_policy(checkpoint: Path, env_id: str, steps: int = 300) -> torch.Tensor:
    """Observations ``[steps, D]`` of the checkpoint's policy (its mode) playing ``env_id``."""
    policy = load_policy(checkpoint)
    env = gym.make(env_id)
    obs, _ = env.reset(seed=3)
    seen = []
    for _ in range(steps):
        seen.append(np.asarray(obs, dtype=np.float32))
        action, _, _ = policy.act(torch.as_tensor(seen[-1])[None], deterministic=True)
        step = action[0, 0].item() if policy.action_spec.kind == "discrete" else action[0].numpy()
        obs, _, terminated, truncated, _ = env.step(step)
        if terminated or truncated:
            obs, _ = env.reset()
    return torch.as_tensor(np.array(seen))


def decisive(policy: ActorCritic, obs: torch.Tensor) -> torch.Tensor:
    """``[M]`` bool: the observations where every component's best logit leads the next by at
    least :data:`DECISIVE_GAP` (a discrete policy's action there is no tie)."""
    with torch.no_grad():
        head, _ = policy(obs)
    ok = torch.ones(obs.shape[0], dtype=torch.bool)
    for logits in head.split(list(policy.action_spec.nvec), dim=-1):
        top = logits.topk(2, dim=-1).values if logits.shape[-1] > 1 else None
        if top is not None:
            ok &= (top[:, 0] - top[:, 1]) >= DECISIVE_GAP
    return ok


def assert_acts_as(policy: ActorCritic, obs: torch.Tensor, action: np.ndarray, second: np.ndarray) -> None:
    """An exported file's outputs for ``obs`` (``action`` and the logits or std) are the
    PyTorch policy's: the same actions (on every observation that is no tie), the head within
    rounding."""
    expected, _, _ = policy.act(obs, deterministic=True)
    with torch.no_grad():
        head, _ = policy(obs)
    spec = policy.action_spec
    assert action.shape == tuple(expected.shape)
    if spec.is_discrete:
        assert action.dtype == np.int64
        np.testing.assert_allclose(second, head.numpy(), rtol=HEAD_TOLERANCE, atol=HEAD_TOLERANCE)
        clear = decisive(policy, obs).numpy()
        assert clear.mean() > 0.95, "too many ties to compare the actions"
        np.testing.assert_array_equal(action[clear], expected.numpy()[clear])
    else:
        assert action.dtype == np.float32
        np.testing.assert_allclose(action, expected.numpy(), rtol=HEAD_TOLERANCE, atol=HEAD_TOLERANCE)
        assert policy.log_std is not None
        std = torch.exp(policy.log_std.detach()).expand_as(expected).numpy()
        np.testing.assert_allclose(second, std, rtol=1e-6)


def raw_actions(policy: ActorCritic, obs: torch.Tensor) -> torch.Tensor:
    """The actions the policy head would give for ``obs`` fed without the normalization: what
    an export that left the normalization out would answer."""
    with torch.no_grad():
        head = policy.actor(obs)
    if policy.action_spec.is_discrete:
        return torch.stack([p.argmax(-1) for p in head.split(list(policy.action_spec.nvec), -1)], -1)
    return head
