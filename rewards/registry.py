"""Build a reward from a command-line spec: ``--reward shaped`` or ``--reward outcome+0.1*shaped``."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from core.plugins import load_object
from rewards.base import BaseReward, WeightedSum
from rewards.presets import (
    AmmoReward,
    ClosingReward,
    DisarmedReward,
    DrawReward,
    EdgeReward,
    HuntReward,
    LaunchReward,
    OutcomeReward,
    PressReward,
    ShapedReward,
    WastedLaunchReward,
    ZeroReward,
)
from sim.config import SimConfig
from sim.layout import ObsLayout

PRESETS: dict[str, type[BaseReward]] = {
    "zero": ZeroReward,
    "outcome": OutcomeReward,
    "draw": DrawReward,
    "launch": LaunchReward,
    "wasted": WastedLaunchReward,
    "closing": ClosingReward,
    "hunt": HuntReward,
    "disarmed": DisarmedReward,
    "edge": EdgeReward,
    "press": PressReward,
    "ammo": AmmoReward,
    "shaped": ShapedReward,
}
"""Reward presets by name."""


def _make_one(spec: str, device: torch.device | str, layout: ObsLayout | None,
              sim_config: SimConfig | None) -> BaseReward:
    """One term: a preset or an import path, called with the arguments its signature accepts
    (of ``device``, ``layout`` and ``sim_config``)."""
    cls: Callable[..., Any]
    if spec in PRESETS:
        cls = PRESETS[spec]
    elif ":" in spec:
        cls = load_object(spec)
        if not callable(cls):
            raise ValueError(f"{spec!r} is not a class or factory")
    else:
        raise ValueError(
            f"unknown reward {spec!r}: expected one of {', '.join(PRESETS)} or an import path "
            "'package.module:ClassName'"
        )
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs: dict[str, Any] = {"device": device, "layout": layout}
    if sim_config is not None:
        kwargs["sim_config"] = sim_config
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    reward = cls(**kwargs)
    if not isinstance(reward, BaseReward):
        raise ValueError(f"{spec!r} built a {type(reward).__name__}, not a rewards.BaseReward")
    return reward.to(device)


def make_reward(spec: str, device: torch.device | str = "cpu", layout: ObsLayout | None = None,
                sim_config: SimConfig | None = None) -> BaseReward:
    """A reward from a spec: a preset name (``zero``, ``outcome``, ``draw``, ``shaped``), an import path
    ``package.module:ClassName`` (called with whichever of ``device``, ``layout`` and
    ``sim_config``, the sim's ``SimConfig``, it accepts),
    or a weighted sum of those joined by ``+`` with optional ``weight*`` prefixes, e.g.
    ``outcome+0.5*shaped`` or ``outcome+-0.1*mypkg.rew:Fuel``."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"reward spec must be a non-empty string, got {spec!r}")
    parts = [p.strip() for p in spec.split("+")]
    if any(not p for p in parts):
        raise ValueError(f"reward spec {spec!r} has an empty term")
    terms: list[tuple[float, BaseReward]] = []
    for part in parts:
        weight, star, name = part.partition("*")
        if star:
            try:
                w = float(weight)
            except ValueError:
                raise ValueError(f"reward term {part!r}: weight {weight!r} is not a number") from None
            # float() also reads 'nan' and 'inf': such a weight would make every reward
            # non-finite, which is a config error, not a training result.
            if not math.isfinite(w):
                raise ValueError(f"reward term {part!r}: weight {weight.strip()!r} is not finite")
            name = name.strip()
        else:
            w, name = 1.0, part
        terms.append((w, _make_one(name, device, layout, sim_config)))
    if len(terms) == 1 and terms[0][0] == 1.0:
        return terms[0][1]
    return WeightedSum(terms, device=device)
