"""Missile tables, reach and escape estimates: the numbers behind the spacetime graph (sim.md).

A missile's true range depends on what its target does. This module answers the questions a
pilot (or a scripted opponent) asks before and after a launch:

- **missile tables**: distance flown and speed against time for a missile launched straight
  (rudder 0) from a range of carrier speeds, integrated with the model's own law and physics
  step (``SimConfig.missile``, ``dt_s``, ``missile_burn_time_s``), sampled every
  ``sample_dt_s``;
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

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sim.config import SimConfig
from sim.layout import MARGIN_SCALE_S, RANGE_SCALE_M, SPEED_SCALE_MPS, ObsLayout
from sim.reach.tables import ReachTables, reach_tables

SPENT_SPEED_MPS = 340.0
"""Mach 1: an inbound missile slower than this is no longer worth defending against (the
``crank`` opponent's rule). The sim itself loses a missile only below ``missile_min_speed_mps``
(200 m/s by default) after burn-out, which is what the tables and the reach use."""

MARGIN_HORIZON_S = 60.0
"""The escape time margin is clipped to ± this."""
MARGIN_SAMPLES_S = (5.0, 10.0, 20.0, 35.0, 60.0)
"""Where the escape time margin first looks for the gap's change of sign (ahead or back)."""

DEFAULT_CARRIER_SPEEDS_MPS = tuple(float(v) for v in range(150, 551, 25))
"""Carrier speeds the default tables are computed for (extrapolation clamps to the ends)."""


@dataclass(frozen=True)
class MissileTables:
    """Distance flown and speed of a missile launched straight, per carrier speed and time.

    Rows are carrier speeds, columns sample times. ``live[c, t]`` is true while the missile
    launched from carrier speed ``c`` is not yet spent at time ``t``.
    """

    carrier_speeds_mps: torch.Tensor
    """``[C]`` increasing carrier (launch) speeds."""
    times_s: torch.Tensor
    """``[T]`` sample times after launch, starting at 0."""
    distance_m: torch.Tensor
    """``[C, T]`` distance flown along the launch line (launch offset not included)."""
    speed_mps: torch.Tensor
    """``[C, T]`` missile speed."""
    live: torch.Tensor
    """``[C, T]`` bool: not yet spent (speed ≥ the spent speed once the motor is out, and
    within the maximum flight time)."""
    spent_speed_mps: float
    """The speed under which a missile counts as spent."""
    launch_offset_m: float
    """How far ahead of the carrier a missile starts (added to reach ranges)."""
    min_turn_radius_m: float
    """The fighters' full-rudder turn radius (used for the turning-away target)."""
    burn_time_s: float
    """The motor burns until this time; a missile is never spent before it."""
    reach: ReachTables
    """The measured reach tables (:mod:`sim.reach.tables`) for the same configuration."""

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> MissileTables:
        """A copy with every tensor on ``device`` (floats cast to ``dtype`` if given; float32
        is plenty for launch decisions and halves the work on GPUs)."""
        dtype = dtype if dtype is not None else self.distance_m.dtype
        return MissileTables(
            self.carrier_speeds_mps.to(device, dtype), self.times_s.to(device, dtype),
            self.distance_m.to(device, dtype), self.speed_mps.to(device, dtype), self.live.to(device),
            self.spent_speed_mps, self.launch_offset_m, self.min_turn_radius_m, self.burn_time_s,
            self.reach.to(device, dtype),
        )

    def lookup(self, carrier_speed_mps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Distance ``[N, T]`` and liveness ``[N, T]`` for carrier speeds ``[N]``.

        Linear interpolation between the two nearest table rows; speeds outside the table are
        clamped to its ends.
        """
        speeds = self.carrier_speeds_mps
        v = carrier_speed_mps.to(speeds.dtype).clamp(speeds[0], speeds[-1])
        hi = torch.searchsorted(speeds, v).clamp(1, speeds.shape[0] - 1)
        lo = hi - 1
        w = ((v - speeds[lo]) / (speeds[hi] - speeds[lo])).unsqueeze(-1)
        dist = self.distance_m[lo] * (1 - w) + self.distance_m[hi] * w
        speed = self.speed_mps[lo] * (1 - w) + self.speed_mps[hi] * w
        burning = self.times_s < self.burn_time_s
        # Spent is final: once below the spent speed after burn-out the missile never recovers.
        live = ((speed >= self.spent_speed_mps) | burning).cumprod(dim=-1).bool()
        return dist, live


def missile_tables(
    config: SimConfig,
    carrier_speeds_mps: tuple[float, ...] = DEFAULT_CARRIER_SPEEDS_MPS,
    sample_dt_s: float = 0.5,
    spent_speed_mps: float | None = None,
    device: torch.device | str = "cpu",
) -> MissileTables:
    """Integrate straight missile flights with the model's law for each carrier speed.

    Uses the physics step ``config.dt_s`` (the exact-turn integrator with rudder 0 reduces to
    ``V' = V + (T − Cd0·V²)·dt``, ``x' = x + V'·dt``), the motor time in whole physics steps
    (``config.burn_steps``) and the maximum flight time; samples every ``sample_dt_s`` (a whole
    number of physics steps). A missile counts as spent below ``spent_speed_mps`` after
    burn-out (default: the sim's own ``missile_min_speed_mps``). Computed in float64 on the CPU,
    then moved to ``device``, with the reach tables of :func:`sim.reach.tables.reach_tables`.
    """
    if spent_speed_mps is None:
        spent_speed_mps = config.missile_min_speed_mps
    if len(carrier_speeds_mps) < 2:
        raise ValueError(f"carrier_speeds_mps needs at least 2 speeds, got {carrier_speeds_mps!r}")
    speeds = torch.tensor(carrier_speeds_mps, dtype=torch.float64)
    if not bool((speeds[1:] > speeds[:-1]).all()) or float(speeds[0]) <= 0:
        raise ValueError(f"carrier_speeds_mps must be positive and increasing, got {carrier_speeds_mps!r}")
    every = round(sample_dt_s / config.dt_s)
    if every < 1 or abs(every * config.dt_s - sample_dt_s) > 1e-9:
        raise ValueError(
            f"sample_dt_s must be a whole multiple of dt_s={config.dt_s}, got {sample_dt_s}"
        )
    if not spent_speed_mps > 0:
        raise ValueError(f"spent_speed_mps must be > 0, got {spent_speed_mps}")
    m = config.missile
    cd0, thrust, dt = m.cd0, m.max_thrust_mps2, config.dt_s
    total_steps = config.max_flight_steps
    v = speeds.clone()
    x = torch.zeros_like(speeds)
    dist_cols, speed_cols = [x.clone()], [v.clone()]
    for step in range(total_steps):
        t_acc = thrust if step < config.burn_steps else 0.0
        v = v + (t_acc - cd0 * v * v) * dt
        x = x + v * dt
        if (step + 1) % every == 0:
            dist_cols.append(x.clone())
            speed_cols.append(v.clone())
    distance = torch.stack(dist_cols, dim=1)
    speed = torch.stack(speed_cols, dim=1)
    times = torch.arange(distance.shape[1], dtype=torch.float64) * sample_dt_s
    burn_time_s = config.burn_steps * dt
    burning = times < burn_time_s - 1e-9
    live = ((speed >= spent_speed_mps) | burning).cumprod(dim=-1).bool()
    return MissileTables(
        speeds.to(device), times.to(device), distance.to(device), speed.to(device),
        live.to(device), float(spent_speed_mps), config.launch_offset_m,
        config.fighter.min_turn_radius_m, burn_time_s - 1e-9,
        reach_tables(config).to(device, torch.float64),
    )


def reach_straight(
    tables: MissileTables,
    carrier_speed_mps: torch.Tensor,
    target_speed_mps: torch.Tensor,
    target_heading_cos: torch.Tensor,
    target_heading_sin: torch.Tensor,
) -> torch.Tensor:
    """Max launch range ``[N]`` (m) against a target that keeps its velocity.

    The target's heading is given relative to the line of sight from launcher to target
    (cos 1: flying straight away, cos −1: coming straight at the launcher); the launcher fires
    along the line of sight.
    """
    r = tables.reach
    return r.lookup(r.reach_m[0], carrier_speed_mps, target_speed_mps, target_heading_cos,
                    target_heading_sin)


def reach_turning_away(
    tables: MissileTables,
    carrier_speed_mps: torch.Tensor,
    target_speed_mps: torch.Tensor,
    target_heading_cos: torch.Tensor,
    target_heading_sin: torch.Tensor,
) -> torch.Tensor:
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


def escape_time_margin(
    tables: MissileTables,
    rx: torch.Tensor,
    ry: torch.Tensor,
    own_vx: torch.Tensor,
    own_vy: torch.Tensor,
    enemy_vx: torch.Tensor,
    enemy_vy: torch.Tensor,
) -> torch.Tensor:
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
    dtype = tables.reach.reach_m.dtype
    rx, ry, ovx, ovy, evx, evy = (x.reshape(-1).to(dtype) for x in (rx, ry, own_vx, own_vy, enemy_vx, enemy_vy))

    def gap(t: torch.Tensor | float) -> torch.Tensor:
        return _escape_gap(tables, rx, ry, ovx, ovy, evx, evy, t)[0]

    g0 = gap(0.0)
    sign = torch.where(g0 > 0, 1.0, -1.0).to(dtype)  # search ahead when outside, back inside
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


def reach_observation(
    tables: MissileTables,
    rx: torch.Tensor,
    ry: torch.Tensor,
    own_vx: torch.Tensor,
    own_vy: torch.Tensor,
    enemy_vx: torch.Tensor,
    enemy_vy: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The observation's ``reach`` block (sim/layout.py), scaled, each of ``rx``'s shape: own
    reach against the enemy flying straight, enemy reach against me turning away, escape time
    margin; from the enemy's position relative to me and both velocities (any frame)."""
    shape = rx.shape
    dtype = tables.reach.reach_m.dtype
    rx, ry, ovx, ovy, evx, evy = (x.reshape(-1).to(dtype) for x in (rx, ry, own_vx, own_vy, enemy_vx, enemy_vy))
    rng = torch.sqrt(rx * rx + ry * ry).clamp_min(1e-6)
    ux, uy = rx / rng, ry / rng
    own_speed = torch.sqrt(ovx * ovx + ovy * ovy)
    enemy_speed = torch.sqrt(evx * evx + evy * evy)
    os_, es_ = own_speed.clamp_min(1e-6), enemy_speed.clamp_min(1e-6)
    # Enemy heading against my line of sight u; my heading against the enemy's, -u.
    own_reach = reach_straight(tables, own_speed, enemy_speed, (evx * ux + evy * uy) / es_,
                               (ux * evy - uy * evx) / es_)
    enemy_reach = reach_turning_away(tables, enemy_speed, own_speed, -(ovx * ux + ovy * uy) / os_,
                                     (uy * ovx - ux * ovy) / os_)
    margin = escape_time_margin(tables, rx, ry, ovx, ovy, evx, evy)
    return (
        (own_reach / RANGE_SCALE_M).view(shape), (enemy_reach / RANGE_SCALE_M).view(shape),
        (margin / MARGIN_SCALE_S).view(shape),
    )


@functools.lru_cache(maxsize=16)
def cached_tables(config: SimConfig, device: str = "cpu", dtype: str = "float32") -> MissileTables:
    """:func:`missile_tables` for ``config`` on ``device`` as ``dtype``, built once per process."""
    return missile_tables(config).to(device, getattr(torch, dtype))


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
