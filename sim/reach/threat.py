"""Threat regions and predicted paths: the geometry the spacetime graph draws (sim.md).

Everything here is in the world frame (m, s) and comes from the reach model (sim/reach/tables.py,
sim/reach/spacetime.py), so a picture drawn from it shows exactly what the model says:

- :func:`threat_region`: for a launch *now* from a launcher, the region at time ``t`` where a
  target that flies a given manoeuvre (straight on, or the escape turn) has been caught by then.
  Along each bearing ``θ`` from the launcher, a target starting at range ``R`` with the
  target's heading is caught by ``t`` iff ``R ≤ reach_by_time(θ, t)``; the region's boundary at
  ``t`` is where such a target starting on that limit has flown to, ``L + reach_by_time·u(θ) +
  d_θ(t)`` with ``d_θ`` the manoeuvre's displacement. A fighter whose predicted position at
  ``t`` lies inside the region at ``t`` has been caught by then;
- :func:`hold_path` / :func:`escape_path`: a fighter's predicted path holding its rudder and
  throttle, or flying the reach model's escape turn away from a launch point;
- :func:`reach_summary`: the in-reach flags and the escape time margin of one fighter against
  the other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sim.config import SimConfig
from sim.physics import aero_step
from sim.reach.missile import MissileTables
from sim.reach.spacetime import (
    escape_time_margin,
    reach_by_time,
    reach_straight,
    reach_turning_away,
)
from sim.reach.tables import target_paths

F64 = torch.float64

TargetPaths = Callable[[SimConfig, torch.Tensor, torch.Tensor, bool, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""A function with :func:`sim.reach.tables.target_paths`' arguments and result (that function,
or a table of its values)."""


def _scalar(v: float) -> torch.Tensor:
    return torch.tensor([float(v)], dtype=F64)


def threat_region(
    tables: MissileTables,
    config: SimConfig,
    launcher_xy: tuple[float, float],
    launcher_speed_mps: float,
    target_heading_rad: float,
    target_speed_mps: float,
    escape: bool,
    times_s: torch.Tensor,
    bearings: int = 144,
    paths: TargetPaths = target_paths,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Boundary ``x, y`` ``[T, bearings + 1]`` (closed) of the region a missile launched now
    from ``launcher_xy`` has caught, by each time ``[T]``, targets with the given heading and
    speed flying straight on or (``escape``) turning away (see the module docstring). The
    bearings are ``2π·k / bearings`` (k = 0 ... bearings); ``paths`` computes the targets'
    displacements."""
    theta = torch.linspace(0.0, 2 * math.pi, bearings + 1, dtype=F64)
    ux, uy = theta.cos(), theta.sin()
    psi = target_heading_rad - theta  # the target's heading against each line of sight
    n = theta.shape[0]
    vs = torch.full((n,), float(launcher_speed_mps), dtype=F64)
    vt = torch.full((n,), float(target_speed_mps), dtype=F64)
    times = times_s.to(F64)
    reach = reach_by_time(tables, escape, vs, vt, psi.cos(), psi.sin(), times)  # [B, T]
    along, across = paths(config, vt, psi, escape, times)  # [B, T]
    x = launcher_xy[0] + (reach + along) * ux.unsqueeze(1) - across * uy.unsqueeze(1)
    y = launcher_xy[1] + (reach + along) * uy.unsqueeze(1) + across * ux.unsqueeze(1)
    return x.t(), y.t()


def hold_path(
    config: SimConfig, x: float, y: float, vx: float, vy: float, rudder: float, throttle: float,
    times_s: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions ``[T]`` of a fighter holding its rudder and throttle (the sim's law and step)."""
    fa = config.fighter
    steps = torch.round(times_s.to(F64) / config.dt_s).long()
    px, py, pvx, pvy = _scalar(x), _scalar(y), _scalar(vx), _scalar(vy)
    rud, thrust = _scalar(rudder), _scalar(throttle * fa.max_thrust_mps2)
    xs, ys = torch.zeros(steps.shape[0], dtype=F64), torch.zeros(steps.shape[0], dtype=F64)
    for step in range(int(steps.max()) + 1 if steps.numel() else 0):
        at = steps == step
        xs[at], ys[at] = px, py
        px, py, pvx, pvy = aero_step(px, py, pvx, pvy, rud, thrust, fa, config.dt_s)
    return xs, ys


def escape_path(
    config: SimConfig, x: float, y: float, vx: float, vy: float, from_xy: tuple[float, float],
    times_s: torch.Tensor, paths: TargetPaths = target_paths,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions ``[T]`` of a fighter flying the reach model's escape from a launch at
    ``from_xy``: full rudder and throttle the short way until it flies straight away along the
    line of sight at launch, then straight on (``paths`` as in :func:`threat_region`)."""
    theta = math.atan2(y - from_xy[1], x - from_xy[0])
    psi = _scalar(math.atan2(vy, vx) - theta)
    along, across = paths(config, _scalar(math.hypot(vx, vy)), psi, True, times_s)
    c, s = math.cos(theta), math.sin(theta)
    return x + along[0] * c - across[0] * s, y + along[0] * s + across[0] * c


@dataclass(frozen=True)
class ReachSummary:
    """One fighter's reach picture against the other (metres, seconds)."""

    range_m: float
    own_reach_straight_m: float
    """An own missile launched now, against the enemy flying straight on."""
    own_reach_escape_m: float
    """An own missile launched now, against the enemy turning away."""
    enemy_reach_straight_m: float
    """An enemy missile launched now, against me flying straight on."""
    enemy_reach_escape_m: float
    """An enemy missile launched now, against me turning away now."""
    escape_margin_s: float
    """:func:`sim.reach.spacetime.escape_time_margin`."""

    @property
    def enemy_in_own_reach(self) -> bool:
        return self.range_m <= self.own_reach_straight_m

    @property
    def own_in_enemy_reach(self) -> bool:
        return self.range_m <= self.enemy_reach_straight_m

    @property
    def own_escape_possible(self) -> bool:
        return self.range_m > self.enemy_reach_escape_m


def reach_summary(
    tables: MissileTables, own_xy: tuple[float, float], own_v: tuple[float, float],
    enemy_xy: tuple[float, float], enemy_v: tuple[float, float],
) -> ReachSummary:
    """The reaches both ways, the flags and the escape time margin for one moment."""
    rx, ry = enemy_xy[0] - own_xy[0], enemy_xy[1] - own_xy[1]
    rng = max(math.hypot(rx, ry), 1e-6)
    ux, uy = rx / rng, ry / rng
    vo, ve = math.hypot(*own_v), math.hypot(*enemy_v)
    no = (own_v[0] / max(vo, 1e-6), own_v[1] / max(vo, 1e-6))
    ne = (enemy_v[0] / max(ve, 1e-6), enemy_v[1] / max(ve, 1e-6))
    # The enemy's heading against my line of sight; mine against the enemy's (-u).
    e_cos, e_sin = _scalar(ne[0] * ux + ne[1] * uy), _scalar(ux * ne[1] - uy * ne[0])
    m_cos, m_sin = _scalar(-(no[0] * ux + no[1] * uy)), _scalar(uy * no[0] - ux * no[1])
    own_s, enemy_s = _scalar(vo), _scalar(ve)
    margin = escape_time_margin(tables, _scalar(rx), _scalar(ry), _scalar(own_v[0]), _scalar(own_v[1]),
                                _scalar(enemy_v[0]), _scalar(enemy_v[1]))
    return ReachSummary(
        range_m=rng,
        own_reach_straight_m=float(reach_straight(tables, own_s, enemy_s, e_cos, e_sin)),
        own_reach_escape_m=float(reach_turning_away(tables, own_s, enemy_s, e_cos, e_sin)),
        enemy_reach_straight_m=float(reach_straight(tables, enemy_s, own_s, m_cos, m_sin)),
        enemy_reach_escape_m=float(reach_turning_away(tables, enemy_s, own_s, m_cos, m_sin)),
        escape_margin_s=float(margin),
    )
