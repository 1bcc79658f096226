"""The tactic library: scripted fighters that each fly a different BVR idea, with parameters.

Specs (what ``--opponent``, ``pipeline.evaluate``, ``league.anchors`` and ``Midrange-v0``'s
``opponent=`` accept; docs/tactics.md):

- ``tactic:NAME``: the tactic with its default parameters;
- ``tactic:NAME?random``: every parameter drawn per episode over its documented range;
- ``tactic:NAME?train`` / ``tactic:NAME?heldout``: drawn per episode over the training or the
  held-out ranges of :mod:`agents.tactics.split` (a tactic without such ranges is refused);
- ``tactic:NAME?PARAM=VALUE`` / ``?PARAM=LOW:HIGH``: one parameter fixed, or drawn per episode over
  ``[LOW, HIGH]`` (inside its documented range); several, and at most one of the draws above,
  joined by ``&`` (commas separate opponents in ``pipeline.evaluate``):
  ``tactic:skate?heldout&defend_tti_s=30:40``, the held-out ``skate`` with its defence drawn
  from the top of its range.

Random draws come from the agent's seeded generator (the ``seed`` it is built with).
"""

from __future__ import annotations

import math

import torch

from agents.tactics.base import Ranges, TacticAgent, check_ranges
from agents.tactics.defence import (
    DragTactic,
    EarlyTactic,
    ExtendTactic,
    FleeTactic,
    NotchTactic,
    PumpTactic,
)
from agents.tactics.offence import (
    BluffTactic,
    EnergyTactic,
    HerdParams,
    HerdTactic,
    LadderTactic,
    LateTactic,
    ReplyTactic,
    SkateTactic,
    SniperTactic,
)
from agents.tactics.split import HELDOUT, HELDOUT_RANGES, TRAINING, TRAINING_RANGES
from agents.tactics.switch import SwitchTactic
from agents.tactics.wander import WanderTactic
from sim.config import SimConfig
from sim.layout import ObsLayout

TACTICS: dict[str, type[TacticAgent]] = {
    cls.name: cls
    for cls in (PumpTactic, NotchTactic, DragTactic, EarlyTactic, SniperTactic, LateTactic, LadderTactic,
                SkateTactic, EnergyTactic, HerdTactic, BluffTactic, ExtendTactic, FleeTactic, SwitchTactic,
                WanderTactic, ReplyTactic)
}
"""Every tactic by name."""

PREFIX = "tactic:"
"""What a tactic spec starts with."""

DRAWS = ("random", "train", "heldout")
"""The draws a spec may ask for after ``?``."""


def is_tactic_spec(spec: str) -> bool:
    """Whether ``spec`` is meant as a tactic (starts with ``tactic:``; it may still be wrong)."""
    return spec.strip().startswith(PREFIX)


def parse_tactic_spec(spec: str) -> tuple[type[TacticAgent], Ranges | None]:
    """The tactic a spec names and the ranges its parameters are drawn from (None: fixed
    defaults; a fixed parameter is a range of one value). Raises ``ValueError`` naming the spec
    and what is allowed."""
    body = spec.strip()[len(PREFIX):]
    name, _, query = body.partition("?")
    if name not in TACTICS:
        raise ValueError(f"unknown tactic {name!r} in {spec!r}: expected one of {', '.join(TACTICS)}")
    cls = TACTICS[name]
    if "?" not in body:
        return cls, None
    items = [item.strip() for item in query.split("&")]
    draws = [item for item in items if "=" not in item]
    if len(draws) > 1:
        raise ValueError(f"tactic spec {spec!r}: at most one of {', '.join(DRAWS)} after '?', got {', '.join(draws)}")
    base = _draw_ranges(spec, cls, draws[0]) if draws else {}
    fixed = dict(_parameter(spec, item) for item in items if "=" in item)
    if not fixed:
        return cls, base
    ranges = {**base, **fixed}
    check_ranges(cls.params_type, cls.ranges, fixed, f"tactic spec {spec!r}")
    return cls, ranges


def _draw_ranges(spec: str, cls: type[TacticAgent], draw: str) -> Ranges:
    """The ranges of one of :data:`DRAWS` for tactic ``cls``."""
    if draw == "random":
        return cls.ranges
    split = {"train": TRAINING_RANGES, "heldout": HELDOUT_RANGES}.get(draw)
    if split is None:
        raise ValueError(f"tactic spec {spec!r}: after '?' expected one of {', '.join(DRAWS)} or "
                         f"PARAM=VALUE, got {draw!r}")
    if cls.name not in split:
        kinds = [k for k, s in (("train", TRAINING_RANGES), ("heldout", HELDOUT_RANGES)) if cls.name in s]
        raise ValueError(f"tactic spec {spec!r}: {cls.name} has no {draw} ranges (it has: "
                         f"{', '.join(['random', *kinds])})")
    return split[cls.name]


def _parameter(spec: str, item: str) -> tuple[str, tuple[float, float]]:
    """``PARAM=VALUE`` as ``(PARAM, (VALUE, VALUE))``, ``PARAM=LOW:HIGH`` as ``(PARAM, (LOW, HIGH))``."""
    param, _, value = item.partition("=")
    try:
        bounds = [float(v) for v in value.split(":")]
    except ValueError:
        bounds = []
    if len(bounds) not in (1, 2) or not all(math.isfinite(b) for b in bounds):
        raise ValueError(f"tactic spec {spec!r}: {item!r} must be PARAM=VALUE or PARAM=LOW:HIGH with numbers")
    return param.strip(), (bounds[0], bounds[-1])


def make_tactic(spec: str, num_envs: int, layout: ObsLayout, device: torch.device | str = "cpu", *,
                seed: int = 0, action_mode: str = "discrete", sim_config: SimConfig | None = None) -> TacticAgent:
    """The tactic agent a spec names (see the module docstring)."""
    cls, draw = parse_tactic_spec(spec)
    return cls(num_envs, layout, device, action_mode, sim_config, seed, draw=draw)


__all__ = [
    "HELDOUT",
    "HELDOUT_RANGES",
    "TACTICS",
    "TRAINING",
    "TRAINING_RANGES",
    "BluffTactic",
    "DragTactic",
    "EarlyTactic",
    "EnergyTactic",
    "FleeTactic",
    "HerdParams",
    "HerdTactic",
    "LadderTactic",
    "LateTactic",
    "NotchTactic",
    "PumpTactic",
    "ReplyTactic",
    "SkateTactic",
    "SniperTactic",
    "SwitchTactic",
    "TacticAgent",
    "WanderTactic",
    "is_tactic_spec",
    "make_tactic",
    "parse_tactic_spec",
]
