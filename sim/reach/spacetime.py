"""Reach and escape estimates: the numbers behind the spacetime graph (sim.md).

A missile's true range depends on what its target does. This module answers the questions a
pilot (or a scripted opponent) asks before and after a launch, from the missile tables of
:mod:`sim.reach.missile`:

- **reach**: the longest launch range from which a missile still hits, against a target that
  keeps flying straight or one that turns away at full rudder and full throttle and then flies
  straight away. It is measured, not modelled: :mod:`sim.reach.tables` simulates shots with the sim's
  own kernels (guidance, drag of every turn, the loss rules) over a grid of shooter speed,
  target speed and aspect, and a geometry is a trilinear lookup in that table, cheap enough
  for every decision step of thousands of environments. ``bench/reach.py`` checks it against
  shots fired in the batched simulator;
- **reach by time**: the longest launch range from which the missile has caught the target by
  time ``t`` (the threat region the spacetime graph draws at height ``t``);
- **escape time margin**: with both fighters flying straight on, how long until the range falls
  to the enemy's reach against an immediate escape turn, i.e. until a launch by the enemy can
  no longer be outrun (negative: how long ago that happened).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sim.layout import MARGIN_SCALE_S, RANGE_SCALE_M, SPEED_SCALE_MPS, ObsLayout
from sim.reach.missile import MissileTables

MARGIN_HORIZON_S = 60.0
"""The escape time margin is clipped to ± this."""
MARGIN_SAMPLES_S = (5.0, 10.0, 20.0, 35.0, 60.0)
"""Where the escape time margin first looks for the gap's change of sign (ahead or back)."""


def reach_straight(tables: MissileTables, carrier_speed_mps: torch.Tensor, target_speed_mps: torch.Tensor,
                   target_heading_cos: torch.Tensor, target_heading_sin: torch.Tensor) -> torch.Tensor:
    """Max launch range ``[N]`` (m) against a target that keeps its velocity.

    The target's heading is given relative to the line of sight from launcher to target
    (cos 1: flying straight away, cos −1: coming straight at the launcher); the launcher fires
    along the line of sight.
    """
    r = tables.reach
    return r.lookup(r.reach_m[0], carrier_speed_mps, target_speed_mps, target_heading_cos,
                    target_heading_sin)


def reach_turning_away(tables: MissileTables, carrier_speed_mps: torch.Tensor, target_speed_mps: torch.Tensor,
                       target_heading_cos: torch.Tensor, target_heading_sin: torch.Tensor) -> torch.Tensor:
    """Max launch range ``[N]`` (m) against a target that turns away at full rudder and full
    throttle, the short way, until it flies straight away along the line of sight, then flies
    straight on (its speed bleeds in the turn). Angles as in :func:`reach_straight`."""
    r = tables.reach
    return r.lookup(r.reach_m[1], carrier_speed_mps, target_speed_mps, target_heading_cos,
                    target_heading_sin)


def reach_by_time(
    tables: MissileTables,
    escape: bool,
    carrier_speed_mps: torch.Tensor,
    target_speed_mps: torch.Tensor,
    target_heading_cos: torch.Tensor,
    target_heading_sin: torch.Tensor,
    times_s: torch.Tensor,
) -> torch.Tensor:
    """Max launch range ``[N, T]`` (m) from which a missile launched now has caught the target
    by each of the times ``[T]`` (straight or ``escape`` target; angles as in
    :func:`reach_straight`). Piecewise linear in time through the measured hit times of shots
    from shorter ranges, reaching the full reach at that shot's hit time and staying there."""
    r = tables.reach
    which = 1 if escape else 0
    args = (carrier_speed_mps, target_speed_mps, target_heading_cos, target_heading_sin)
    rng = r.lookup(r.catch_range_m[which], *args)  # [N, K]
    hit_t = r.lookup(r.catch_time_s[which], *args)
    zero = torch.zeros_like(rng[:, :1])
    r0, r1 = torch.cat([zero, rng[:, :-1]], 1), rng
    t0, t1 = torch.cat([zero, hit_t[:, :-1]], 1), hit_t
    t = times_s.to(rng.dtype).view(1, 1, -1)
    r0, r1, t0, t1 = (x.unsqueeze(-1) for x in (r0, r1, t0, t1))
    frac = ((t - t0) / (t1 - t0).clamp_min(1e-6)).clamp(0, 1)
    seg = torch.where(t >= t0, r0 + (r1 - r0) * frac, torch.zeros_like(frac))  # [N, K, T]
    return seg.max(dim=1).values


def _flat(tables: MissileTables, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``tensors`` flattened to ``[N]`` in the dtype of the reach tables."""
    dtype = tables.reach.reach_m.dtype
    return tuple(x.reshape(-1).to(dtype) for x in tensors)


def _escape_gap(
    tables: MissileTables, rx: torch.Tensor, ry: torch.Tensor, ovx: torch.Tensor, ovy: torch.Tensor,
    evx: torch.Tensor, evy: torch.Tensor, t: torch.Tensor | float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Range minus the enemy's reach against me turning away, both flown straight on for ``t``
    seconds from now (negative ``t``: back); also that range. All ``[N]``."""
    px, py = rx + (evx - ovx) * t, ry + (evy - ovy) * t  # enemy minus own
    rng = torch.sqrt(px * px + py * py).clamp_min(1e-6)
    ux, uy = -px / rng, -py / rng  # line of sight from the enemy to me
    own_speed = torch.sqrt(ovx * ovx + ovy * ovy)
    inv = 1.0 / own_speed.clamp_min(1e-6)
    reach = reach_turning_away(tables, torch.sqrt(evx * evx + evy * evy), own_speed,
                               (ovx * ux + ovy * uy) * inv, (ux * ovy - uy * ovx) * inv)
    return rng - reach, rng


def escape_time_margin(tables: MissileTables, rx: torch.Tensor, ry: torch.Tensor, own_vx: torch.Tensor,
                       own_vy: torch.Tensor, enemy_vx: torch.Tensor, enemy_vy: torch.Tensor) -> torch.Tensor:
    """Escape time margin ``[N]`` (s) for the own fighter, from the enemy's position relative to
    it ``r`` and both velocities (any frame; ``[N]`` tensors).

    Both fighters are predicted flying straight on at constant velocity; the *gap* at time ``t``
    is the range then minus the enemy's reach against me turning away then
    (:func:`reach_turning_away` for that geometry). Outside now (gap > 0), the margin is the
    first time ahead at which the gap reaches zero: the seconds left before an enemy launch can
    no longer be outrun by an escape turn. Inside, it is minus the time back to the last moment
    the gap was positive. The gap is sampled at ``MARGIN_SAMPLES_S`` ahead (or back), the first
    bracket where it changes sign is narrowed by two false-position steps (eight table lookups
    in all); no sign change within ``MARGIN_HORIZON_S`` gives ± that horizon.
    """
    rx, ry, ovx, ovy, evx, evy = _flat(tables, rx, ry, own_vx, own_vy, enemy_vx, enemy_vy)

    def gap(t: torch.Tensor | float) -> torch.Tensor:
        return _escape_gap(tables, rx, ry, ovx, ovy, evx, evy, t)[0]

    g0 = gap(0.0)
    sign = torch.where(g0 > 0, 1.0, -1.0).to(g0.dtype)  # search ahead when outside, back inside
    ta, ga = torch.zeros_like(g0), g0
    tb, gb = torch.full_like(g0, math.inf), g0
    found = torch.zeros_like(g0, dtype=torch.bool)
    for sample in MARGIN_SAMPLES_S:
        t = sign * sample
        g = gap(t)
        new = ~found & ((g > 0) != (g0 > 0))
        tb, gb = torch.where(new, t, tb), torch.where(new, g, gb)
        found = found | new
        ta, ga = torch.where(found, ta, t), torch.where(found, ga, g)
    # False position inside [ta, tb] (ga and gb of opposite signs where found).
    for _ in range(2):
        denom = torch.where(found, gb - ga, torch.ones_like(ga))
        t = torch.where(found, ta - ga * (tb - ta) / denom, ta)
        g = gap(t)
        same_a = (g > 0) == (ga > 0)
        ta, ga = torch.where(same_a, t, ta), torch.where(same_a, g, ga)
        tb, gb = torch.where(same_a, tb, t), torch.where(same_a, gb, g)
    denom = torch.where(found, gb - ga, torch.ones_like(ga))
    root = torch.where(found, ta - ga * (tb - ta) / denom, sign * MARGIN_HORIZON_S)
    return root.clamp(-MARGIN_HORIZON_S, MARGIN_HORIZON_S)


def reach_observation(tables: MissileTables, rx: torch.Tensor, ry: torch.Tensor, own_vx: torch.Tensor,
                      own_vy: torch.Tensor, enemy_vx: torch.Tensor, enemy_vy: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The observation's ``reach`` block (sim/layout.py), scaled, each of ``rx``'s shape: own
    reach against the enemy flying straight and against it turning away (the no-escape reach),
    enemy reach against me turning away, escape time margin; from the enemy's position relative
    to me and both velocities (any frame)."""
    shape = rx.shape
    rx, ry, ovx, ovy, evx, evy = _flat(tables, rx, ry, own_vx, own_vy, enemy_vx, enemy_vy)
    rng = torch.sqrt(rx * rx + ry * ry).clamp_min(1e-6)
    ux, uy = rx / rng, ry / rng
    own_speed = torch.sqrt(ovx * ovx + ovy * ovy)
    enemy_speed = torch.sqrt(evx * evx + evy * evy)
    os_, es_ = own_speed.clamp_min(1e-6), enemy_speed.clamp_min(1e-6)
    # Enemy heading against my line of sight u; my heading against the enemy's, -u.
    own_reach = reach_straight(tables, own_speed, enemy_speed, (evx * ux + evy * uy) / es_,
                               (ux * evy - uy * evx) / es_)
    own_escape_reach = reach_turning_away(tables, own_speed, enemy_speed, (evx * ux + evy * uy) / es_,
                                          (ux * evy - uy * evx) / es_)
    enemy_reach = reach_turning_away(tables, enemy_speed, own_speed, -(ovx * ux + ovy * uy) / os_,
                                     (uy * ovx - ux * ovy) / os_)
    margin = escape_time_margin(tables, rx, ry, ovx, ovy, evx, evy)
    return (
        (own_reach / RANGE_SCALE_M).view(shape), (own_escape_reach / RANGE_SCALE_M).view(shape),
        (enemy_reach / RANGE_SCALE_M).view(shape),
        (margin / MARGIN_SCALE_S).view(shape),
    )



@dataclass
class ReachFeatures:
    """Reach estimates for one side's view of the current geometry, all ``[N]`` in metres."""

    range_m: torch.Tensor
    """Current range to the enemy."""
    own_reach_straight_m: torch.Tensor
    """How far an own missile launched now reaches against the enemy flying straight on."""
    own_reach_escape_m: torch.Tensor
    """How far an own missile launched now reaches against the enemy turning away."""
    enemy_reach_straight_m: torch.Tensor
    """How far an enemy missile launched now reaches against me flying straight on."""
    enemy_reach_escape_m: torch.Tensor
    """How far an enemy missile launched now reaches against me turning away now."""
    escape_margin_s: torch.Tensor
    """Escape time margin (:func:`escape_time_margin`), seconds."""

    @property
    def enemy_in_own_reach(self) -> torch.Tensor:
        """Bool ``[N]``: a shot now would catch the enemy if it flew straight on."""
        return self.range_m <= self.own_reach_straight_m

    @property
    def own_escape_possible(self) -> torch.Tensor:
        """Bool ``[N]``: turning away now would outrun an enemy missile launched now."""
        return self.range_m > self.enemy_reach_escape_m


def own_reach_straight(obs: torch.Tensor, layout: ObsLayout, tables: MissileTables) -> torch.Tensor:
    """Reach ``[N]`` (m) of an own missile launched now against the enemy flying straight on,
    from egocentric observations ``[N, D]`` (the one number a launch decision needs)."""
    return _own_reach(obs, layout, tables, reach_straight)


def own_reach_turning_away(obs: torch.Tensor, layout: ObsLayout, tables: MissileTables) -> torch.Tensor:
    """No-escape reach ``[N]`` (m) of an own missile launched now: against the enemy turning
    away at once (the most it can do to outrun it), from egocentric observations ``[N, D]``."""
    return _own_reach(obs, layout, tables, reach_turning_away)


def _own_reach(obs: torch.Tensor, layout: ObsLayout, tables: MissileTables, reach: Callable[..., torch.Tensor]
               ) -> torch.Tensor:
    if obs.dim() != 2 or obs.shape[1] != layout.size:
        raise ValueError(f"obs must have shape (N, {layout.size}), got {tuple(obs.shape)}")
    f = obs.to(tables.distance_m.dtype)
    bc, bs = f[:, layout.index("enemy.bearing_cos")], f[:, layout.index("enemy.bearing_sin")]
    hc, hs = f[:, layout.index("enemy.rel_heading_cos")], f[:, layout.index("enemy.rel_heading_sin")]
    return reach(
        tables, f[:, layout.index("own.speed")] * SPEED_SCALE_MPS,
        f[:, layout.index("enemy.speed")] * SPEED_SCALE_MPS, hc * bc + hs * bs, hs * bc - hc * bs,
    )


def reach_features(obs: torch.Tensor, layout: ObsLayout, tables: MissileTables) -> ReachFeatures:
    """Reach estimates from egocentric observations ``[N, D]`` (see :mod:`sim.layout`).

    Own reach: carrier = me at my speed, target = the enemy with its heading relative to my
    line of sight. Enemy reach: carrier = the enemy at its speed, target = me, with my heading
    relative to the enemy's line of sight to me (the reverse of mine).
    """
    if obs.dim() != 2 or obs.shape[1] != layout.size:
        raise ValueError(f"obs must have shape (N, {layout.size}), got {tuple(obs.shape)}")
    f = obs.to(tables.distance_m.dtype)

    def col(name: str) -> torch.Tensor:
        return f[:, layout.index(name)]

    rng = col("enemy.range") * RANGE_SCALE_M
    own_speed = col("own.speed") * SPEED_SCALE_MPS
    enemy_speed = col("enemy.speed") * SPEED_SCALE_MPS
    bc, bs = col("enemy.bearing_cos"), col("enemy.bearing_sin")
    hc, hs = col("enemy.rel_heading_cos"), col("enemy.rel_heading_sin")
    # Enemy heading relative to my LOS u = (bc, bs): rotate the body-frame heading by −bearing.
    e_cos, e_sin = hc * bc + hs * bs, hs * bc - hc * bs
    # My heading (1, 0) relative to the enemy's LOS to me, −u: rotate by −(bearing + π).
    m_cos, m_sin = -bc, bs
    return ReachFeatures(
        range_m=rng,
        own_reach_straight_m=reach_straight(tables, own_speed, enemy_speed, e_cos, e_sin),
        own_reach_escape_m=reach_turning_away(tables, own_speed, enemy_speed, e_cos, e_sin),
        enemy_reach_straight_m=reach_straight(tables, enemy_speed, own_speed, m_cos, m_sin),
        enemy_reach_escape_m=reach_turning_away(tables, enemy_speed, own_speed, m_cos, m_sin),
        escape_margin_s=escape_time_margin(
            tables, rng * bc, rng * bs, own_speed, torch.zeros_like(own_speed),
            enemy_speed * hc, enemy_speed * hs,
        ),
    )
