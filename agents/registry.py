"""Build an agent from a command-line spec: a scripted name or an import path.

Checkpoints are the third kind of spec, but loading one needs the learner (a floor above this
package), so ``pipeline.config.specs.make_agent`` handles them and hands every other spec to
:func:`make_agent` here."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from agents.base import BaseAgent, RandomAgent
from agents.scripted import CrankAgent, PursuitAgent, ShooterAgent, StraightAgent
from core.plugins import load_object
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
"""File suffixes that make a spec a checkpoint."""


def looks_like_checkpoint(spec: str) -> bool:
    """Whether ``spec`` names a checkpoint: a ``.pt`` / ``.pth`` file or an existing folder (that
    should hold ``latest.pt``). Scripted names are checked before this."""
    path = Path(spec)
    return path.suffix in CHECKPOINT_SUFFIXES or path.is_dir()


def _construct(factory: Any, kwargs: dict[str, Any], spec: str) -> BaseAgent:
    """Call ``factory`` with the keyword arguments its signature accepts."""
    params: Mapping[str, inspect.Parameter]
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
    - an import path ``package.module:Name`` naming a :class:`BaseAgent` subclass or factory;
      it is called with those of ``num_envs``, ``layout``, ``device``, ``seed``,
      ``action_mode``, ``sim_config`` that its signature accepts.

    A checkpoint spec raises ``ValueError``: ``pipeline.config.specs.make_agent`` loads those
    (``deterministic`` only matters there; it is taken here so both share one signature).
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
    if looks_like_checkpoint(spec):
        raise ValueError(
            f"agent spec {spec!r} is a checkpoint: checkpoints are loaded by "
            "pipeline.config.specs.make_agent, not agents.registry.make_agent"
        )
    if ":" in spec:
        factory = load_object(spec)
        if not callable(factory):
            raise ValueError(f"{spec!r} is not a class or factory")
        return _construct(factory, kwargs, spec)
    raise ValueError(
        f"unknown agent {spec!r}: expected one of {', '.join(SCRIPTED)}, a checkpoint path "
        "(.pt file or folder with latest.pt; pipeline.config.specs.make_agent loads those) or an "
        "import path 'package.module:ClassName'"
    )
