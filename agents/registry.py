"""Build an agent from a command-line spec: scripted name, checkpoint path or import path."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import torch

from agents.base import BaseAgent, RandomAgent
from agents.policy import PolicyAgent
from agents.scripted import CrankAgent, PursuitAgent, ShooterAgent, StraightAgent
from sim.config import SimConfig
from sim.layout import ObsLayout

SCRIPTED: dict[str, type[BaseAgent]] = {
    "straight": StraightAgent,
    "pursuit": PursuitAgent,
    "shooter": ShooterAgent,
    "crank": CrankAgent,
    "random": RandomAgent,
}
"""Scripted agents by name."""

CHECKPOINT_SUFFIXES = (".pt", ".pth")


def load_object(path: str) -> Any:
    """Import ``package.module:Name`` and return ``Name``, with a clear error when it fails."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"import path must look like 'package.module:Name', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r} from {path!r}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _construct(factory: Any, kwargs: dict[str, Any], spec: str) -> BaseAgent:
    """Call ``factory`` with the keyword arguments its signature accepts."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    agent = factory(**kwargs)
    if not isinstance(agent, BaseAgent):
        raise ValueError(f"{spec!r} built a {type(agent).__name__}, not an agents.BaseAgent")
    return agent


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
    """An agent for ``num_envs`` environments from a spec string.

    - a scripted name: ``straight``, ``pursuit``, ``shooter``, ``crank``, ``random``
      (``random`` uses ``seed``; the others use ``sim_config`` for their missile tables);
    - a checkpoint: a ``.pt`` / ``.pth`` file, or a folder holding ``latest.pt``, loaded with
      ``learner.checkpoint.load_policy`` and wrapped in :class:`PolicyAgent`
      (``deterministic`` picks the most likely action);
    - an import path ``package.module:Name`` naming a :class:`BaseAgent` subclass or factory;
      it is called with those of ``num_envs``, ``layout``, ``device``, ``seed``,
      ``action_mode``, ``sim_config`` that its signature accepts.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"agent spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    kwargs: dict[str, Any] = {
        "num_envs": num_envs, "layout": layout, "device": device, "seed": seed,
        "action_mode": action_mode, "sim_config": sim_config,
    }
    if spec in SCRIPTED:
        return _construct(SCRIPTED[spec], kwargs, spec)
    path = Path(spec)
    if path.suffix in CHECKPOINT_SUFFIXES or path.is_dir():
        if path.is_dir():
            path = path / "latest.pt"
        if not path.is_file():
            raise ValueError(f"checkpoint {str(path)!r} does not exist")
        # The learner is only needed for checkpoints.
        from learner.checkpoint import load_policy

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
    if ":" in spec:
        factory = load_object(spec)
        if not callable(factory):
            raise ValueError(f"{spec!r} is not a class or factory")
        return _construct(factory, kwargs, spec)
    raise ValueError(
        f"unknown agent {spec!r}: expected one of {', '.join(SCRIPTED)}, a checkpoint path "
        "(.pt file or folder with latest.pt) or an import path 'package.module:ClassName'"
    )
