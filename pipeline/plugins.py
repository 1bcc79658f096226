"""Build agents and rewards from command-line specs, checkpoints included.

``agents.registry.make_agent`` builds scripted agents and ``package.module:Name`` plug-ins; a
checkpoint needs the learner to load it, and only this floor may import both, so checkpoint
specs are handled here and every other spec is handed down. Rewards need nothing above their
own floor: :func:`make_reward` is ``rewards.registry.make_reward``, named here so that wiring
code finds both builders in one place.
"""

from __future__ import annotations

from pathlib import Path

import torch

from agents.base import BaseAgent
from agents.policy import PolicyAgent
from agents.registry import SCRIPTED, looks_like_checkpoint
from agents.registry import make_agent as make_plain_agent
from learner.checkpoint import LATEST_NAME, load_policy
from rewards.registry import make_reward
from sim.config import SimConfig
from sim.layout import ObsLayout

__all__ = ["load_checkpoint_agent", "make_agent", "make_reward"]


def load_checkpoint_agent(
    spec: str,
    num_envs: int,
    layout: ObsLayout,
    device: torch.device | str = "cpu",
    *,
    seed: int = 0,
    deterministic: bool = False,
) -> PolicyAgent:
    """A :class:`PolicyAgent` around the policy saved at ``spec`` (a ``.pt`` / ``.pth`` file, or
    a folder holding ``latest.pt``), checked against the simulator's observation ``layout``;
    ``deterministic`` picks the most likely action."""
    path = Path(spec)
    if path.is_dir():
        path = path / LATEST_NAME
    if not path.is_file():
        raise ValueError(f"checkpoint {str(path)!r} does not exist")
    policy = load_policy(path, device=device)
    saved_layout = getattr(policy, "obs_layout", None)
    if saved_layout is not None:
        diff = ObsLayout.describe_difference(saved_layout, layout.metadata())
        if diff is not None:
            raise ValueError(f"checkpoint {str(path)!r} was trained on another observation layout: {diff}")
    policy_dim = getattr(policy, "obs_dim", layout.size)
    if policy_dim != layout.size:
        raise ValueError(
            f"checkpoint {str(path)!r} expects observations of size {policy_dim}, "
            f"the simulator's layout has {layout.size}"
        )
    return PolicyAgent(policy, num_envs, deterministic=deterministic, seed=seed).to(device)


def make_agent(
    spec: str,
    num_envs: int,
    layout: ObsLayout,
    device: torch.device | str = "cpu",
    *,
    seed: int = 0,
    action_mode: str = "discrete",
    sim_config: SimConfig | None = None,
    deterministic: bool = False,
) -> BaseAgent:
    """An agent for ``num_envs`` environments from a spec string: a checkpoint (``.pt`` /
    ``.pth`` file, or a folder holding ``latest.pt``; see :func:`load_checkpoint_agent`), or
    anything ``agents.registry.make_agent`` builds (a scripted name or ``package.module:Name``).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"agent spec must be a non-empty string, got {spec!r}")
    name = spec.strip()
    # Scripted names win over a folder of the same name, as in agents.registry.
    if name not in SCRIPTED and looks_like_checkpoint(name):
        return load_checkpoint_agent(
            name, num_envs, layout, device, seed=seed, deterministic=deterministic,
        )
    return make_plain_agent(
        name, num_envs, layout, device, seed=seed, action_mode=action_mode,
        sim_config=sim_config, deterministic=deterministic,
    )

