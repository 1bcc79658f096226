"""Build an agent from a command-line spec: a scripted name, an import path or a checkpoint.

Loading a checkpoint needs the learner (a floor above this package), so :func:`make_agent` takes
the loader as an argument: ``pipeline.config.specs.build_agent`` is :func:`make_agent` with
``pipeline.config.specs.load_checkpoint_agent`` given; without one a checkpoint spec is refused."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TypedDict

import torch

from agents.base import BaseAgent, RandomAgent
from agents.champions import CHAMPIONS
from agents.scripted import CrankAgent, PursuitAgent, ShooterAgent, StraightAgent
from agents.tactics import is_tactic_spec, make_tactic
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

AGENT_NAMES: tuple[str, ...] = (*SCRIPTED, *CHAMPIONS)
"""Every agent a bare name builds: the scripted ones, then the packaged champions."""

CHECKPOINT_SUFFIXES = (".pt", ".pth")
"""File suffixes that make a spec a checkpoint."""


def looks_like_checkpoint(spec: str) -> bool:
    """Whether ``spec`` names a checkpoint: a ``.pt`` / ``.pth`` file or an existing folder (that
    should hold ``latest.pt``). Scripted names are checked before this."""
    path = Path(spec)
    return path.suffix in CHECKPOINT_SUFFIXES or path.is_dir()


def names_a_path(spec: str) -> bool:
    """Whether ``spec`` can only mean a file: a path separator and no ``module:Name`` colon."""
    seps = [os.sep] + ([os.altsep] if os.altsep else [])
    return ":" not in spec and any(s in spec for s in seps)


class CheckpointLoader(Protocol):
    """Loads the agent a checkpoint spec names (``pipeline.config.specs.load_checkpoint_agent``)."""

    def __call__(self, spec: str, num_envs: int, layout: ObsLayout, device: torch.device | str, *,
                 seed: int, deterministic: bool, sim_config: SimConfig) -> BaseAgent: ...


class AgentOptions(TypedDict, total=False):
    """The keyword options of :func:`make_agent` that a builder around it passes on."""

    seed: int
    action_mode: str
    sim_config: SimConfig | None
    deterministic: bool


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
    load_checkpoint: CheckpointLoader | None = None,
) -> BaseAgent:
    """An agent for ``num_envs`` environments from a spec string.

    - a scripted name: ``straight``, ``pursuit``, ``shooter``, ``crank``, ``random``
      (``random`` uses ``seed``; the others use ``sim_config`` for their missile tables);
    - a tactic of the library, ``tactic:NAME`` or ``tactic:NAME?random`` (``?train``,
      ``?heldout``): :mod:`agents.tactics` (randomised ones draw with ``seed``);
    - a champion's name (``ace``; ``agents.champions``): its packaged policy file, built by
      ``load_checkpoint`` as a checkpoint is (without ``load_checkpoint`` a ``ValueError``);
    - a checkpoint (a ``.pt`` / ``.pth`` file, a folder, or with ``load_checkpoint`` any path
      without a ``:``), built by ``load_checkpoint`` with ``seed``, ``deterministic`` and the
      simulator's configuration (``sim_config``, else one of ``action_mode``); without
      ``load_checkpoint`` it raises ``ValueError`` (``pipeline.config.specs.build_agent`` gives
      one). Scripted names win over a folder of the same name;
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
    if spec in CHAMPIONS:
        if load_checkpoint is None:
            raise ValueError(f"agent {spec!r} is a packaged policy ({CHAMPIONS[spec]}): it is loaded "
                             "by pipeline.config.specs.build_agent, not agents.registry.make_agent")
        spec = str(CHAMPIONS[spec])
    if is_tactic_spec(spec):
        return make_tactic(spec, num_envs, layout, device, seed=seed, action_mode=action_mode,
                           sim_config=sim_config)
    if load_checkpoint is not None and (looks_like_checkpoint(spec) or names_a_path(spec)):
        return load_checkpoint(
            spec, num_envs, layout, device, seed=seed, deterministic=deterministic,
            sim_config=sim_config if sim_config is not None else SimConfig(action_mode=action_mode),
        )
    if looks_like_checkpoint(spec):
        raise ValueError(
            f"agent spec {spec!r} is a checkpoint: checkpoints are loaded by "
            "pipeline.config.specs.build_agent, not agents.registry.make_agent"
        )
    if ":" in spec:
        factory = load_object(spec)
        if not callable(factory):
            raise ValueError(f"{spec!r} is not a class or factory")
        return _construct(factory, kwargs, spec)
    raise ValueError(
        f"unknown agent {spec!r}: expected one of {', '.join(AGENT_NAMES)}, a tactic 'tactic:NAME', a checkpoint path "
        "(.pt file or folder with latest.pt; pipeline.config.specs.build_agent loads those) or an "
        "import path 'package.module:ClassName'"
    )
