"""Build agents and rewards from command-line specs, checkpoints included.

``agents.registry.make_agent`` builds scripted agents and ``package.module:Name`` plug-ins; a
checkpoint needs the learner to load it, and only this floor may import both, so
:func:`build_agent` is that builder given :func:`load_checkpoint_agent` for checkpoint specs.
Rewards need nothing above their own floor: :func:`make_reward` is
``rewards.registry.make_reward``, named here so that wiring code finds both builders in one
place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from agents.base import BaseAgent
from agents.policy import PolicyAgent
from agents.registry import AgentOptions, make_agent
from learner.checkpoint import load_policy, resolve_checkpoint_path
from learner.spaces import ActionSpec
from rewards.registry import make_reward
from sim.config import SimConfig
from sim.layout import ObsLayout

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["build_agent", "load_checkpoint_agent", "make_reward"]


def _describe(spec: ActionSpec) -> str:
    if spec.kind == "continuous":
        return f"continuous actions in {list(zip(spec.low, spec.high, strict=True))}"
    return f"{spec.kind.replace('_', '-')} actions with choices {list(spec.nvec)}"


def _check_action_mode(path: object, saved: ActionSpec, sim_config: SimConfig) -> None:
    """Refuse a policy whose actions the simulator cannot take: a ``ValueError`` naming both
    action modes (a continuous policy in a discrete run would crash every actor that uses it)."""
    expected = ActionSpec.for_sim(sim_config)
    if saved == expected:
        return
    saved_mode = "continuous" if saved.kind == "continuous" else "discrete"
    if saved_mode != sim_config.action_mode:
        raise ValueError(f"checkpoint {path} acts in action_mode {saved_mode!r}, the simulator's "
                         f"action_mode is {sim_config.action_mode!r}")
    raise ValueError(f"checkpoint {path} produces {_describe(saved)}, the simulator "
                     f"(action_mode {sim_config.action_mode!r}) takes {_describe(expected)}")


def load_checkpoint_agent(
    spec: str,
    num_envs: int,
    layout: ObsLayout,
    device: torch.device | str = "cpu",
    *,
    seed: int = 0,
    deterministic: bool = False,
    sim_config: SimConfig | None = None,
) -> PolicyAgent:
    """A :class:`PolicyAgent` around the policy saved at ``spec`` (a checkpoint file, a
    checkpoints folder or a run directory), checked against the simulator's observation
    ``layout`` and, given ``sim_config``, its action mode; ``deterministic`` picks the most
    likely action. A missing or damaged checkpoint raises ``learner.checkpoint.CheckpointError``
    (a ``ValueError``), a mismatch a ``ValueError``; each one line naming the file."""
    path = resolve_checkpoint_path(spec)
    policy = load_policy(path, device=device)
    saved_layout = getattr(policy, "obs_layout", None)
    reads: int | None = layout.size
    if saved_layout is not None:
        reads = ObsLayout.reads(saved_layout, layout.metadata())  # without the sim's memory: the frame
        if reads is None:
            diff = ObsLayout.describe_difference(saved_layout, layout.metadata())
            raise ValueError(f"checkpoint {path} was trained on another observation layout: {diff}")
    policy_dim = getattr(policy, "obs_dim", layout.size)
    if policy_dim != reads:
        raise ValueError(
            f"checkpoint {path} expects observations of size {policy_dim}, "
            f"the simulator's layout has {layout.size}"
        )
    if sim_config is not None:
        _check_action_mode(path, policy.action_spec, sim_config)
    return PolicyAgent(policy, num_envs, deterministic=deterministic, seed=seed, obs_dim=layout.size).to(device)


def build_agent(
    spec: str, num_envs: int, layout: ObsLayout, device: torch.device | str = "cpu", **options: Unpack[AgentOptions]
) -> BaseAgent:
    """An agent for ``num_envs`` environments from a spec string: a checkpoint (a ``.pt`` /
    ``.pth`` file, a checkpoints folder or a run directory; see :func:`load_checkpoint_agent`),
    or anything else ``agents.registry.make_agent`` builds (a scripted name or
    ``package.module:Name``), which takes the same ``options``. A checkpoint must act in the
    simulator's action mode (``sim_config.action_mode``, else ``action_mode``).
    """
    return make_agent(spec, num_envs, layout, device, load_checkpoint=load_checkpoint_agent, **options)
