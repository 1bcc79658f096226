"""Missile tables and reach estimates: the numbers behind the spacetime graph (sim.md).

A missile's true range depends on what its target does. This module answers the two questions a
pilot (or a scripted opponent) asks before and after a launch:

- **missile tables**: distance flown and speed against time for a missile launched straight
  (rudder 0) from a range of carrier speeds, integrated with the model's own law and physics
  step (``SimConfig.missile``, ``dt_s``, ``missile_burn_time_s``), sampled every
  ``sample_dt_s``;
- **reach**: the longest launch range from which a missile still catches the target before it
  is *spent* (slower than ``spent_speed_mps``, Mach 1 by default, or past its maximum flight
  time), against a target that keeps flying straight or one that turns away at full rudder
  and then flies straight away.

The reach model assumes the missile flies a straight collision course at its table speed
(steering costs it nothing), so it is an upper bound on what proportional navigation achieves;
it is the quantity a launch decision needs, cheap enough to evaluate every decision step for
thousands of environments at once (pure tensor code, no Python loop over environments).

Geometry for one launch: the target sits at range ``R`` along the unit line of sight ``u`` from
the launch point and moves by ``d(t)`` in time ``t``. The missile, having flown ``D(t)``, can
meet it at ``t`` iff ``|R·u + d(t)| ≤ D(t)``, i.e. ``R ≤ −d∥(t) + sqrt(D(t)² − d⊥(t)²)`` where
``d∥``, ``d⊥`` are ``d``'s components along and across ``u``. The reach is the maximum of that
bound over the missile's live times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sim.config import SimConfig
from sim.layout import RANGE_SCALE_M, SPEED_SCALE_MPS, ObsLayout

SPENT_SPEED_MPS = 340.0
"""Mach 1: a missile slower than this is treated as spent by the reach estimate."""

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

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> MissileTables:
        """A copy with every tensor on ``device`` (floats cast to ``dtype`` if given; float32
        is plenty for launch decisions and halves the work on GPUs)."""
        dtype = dtype if dtype is not None else self.distance_m.dtype
        return MissileTables(
            self.carrier_speeds_mps.to(device, dtype), self.times_s.to(device, dtype),
            self.distance_m.to(device, dtype), self.speed_mps.to(device, dtype), self.live.to(device),
            self.spent_speed_mps, self.launch_offset_m, self.min_turn_radius_m, self.burn_time_s,
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
    spent_speed_mps: float = SPENT_SPEED_MPS,
    device: torch.device | str = "cpu",
) -> MissileTables:
    """Integrate straight missile flights with the model's law for each carrier speed.

    Uses the physics step ``config.dt_s`` (the exact-turn integrator with rudder 0 reduces to
    ``V' = V + (T − Cd0·V²)·dt``, ``x' = x + V'·dt``), the motor time in whole physics steps
    (``config.burn_steps``) and the maximum flight time; samples every ``sample_dt_s`` (a whole
    number of physics steps). Computed in float64 on the CPU, then moved to ``device``.
    """
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
    )


def _reach_from_path(
    tables: MissileTables, carrier_speed: torch.Tensor, d_along: torch.Tensor, d_across: torch.Tensor
) -> torch.Tensor:
    """Max launch range given the target's displacement ``[N, T]`` along / across the LOS."""
    dist, live = tables.lookup(carrier_speed)
    dist = dist + tables.launch_offset_m
    slack = dist * dist - d_across * d_across
    bound = -d_along + slack.clamp_min(0).sqrt()
    ok = live & (slack >= 0)
    bound = torch.where(ok, bound, torch.full_like(bound, -math.inf))
    return bound.max(dim=-1).values.clamp_min(0)


def reach_straight(
    tables: MissileTables,
    carrier_speed_mps: torch.Tensor,
    target_speed_mps: torch.Tensor,
    target_heading_cos: torch.Tensor,
    target_heading_sin: torch.Tensor,
) -> torch.Tensor:
    """Max launch range ``[N]`` (m) against a target that keeps its velocity.

    The target's heading is given relative to the line of sight from launcher to target
    (cos 1: flying straight away, cos −1: coming straight at the launcher).
    """
    t = tables.times_s.to(carrier_speed_mps.dtype)
    vt = target_speed_mps.unsqueeze(-1) * t
    d_along = vt * target_heading_cos.unsqueeze(-1)
    d_across = vt * target_heading_sin.unsqueeze(-1)
    return _reach_from_path(tables, carrier_speed_mps, d_along, d_across)


def reach_turning_away(
    tables: MissileTables,
    carrier_speed_mps: torch.Tensor,
    target_speed_mps: torch.Tensor,
    target_heading_cos: torch.Tensor,
    target_heading_sin: torch.Tensor,
) -> torch.Tensor:
    """Max launch range ``[N]`` (m) against a target that turns away at full rudder.

    The target turns the short way until it flies straight away along the line of sight (a
    circle of the fighters' minimum turn radius, at its current speed), then flies straight on
    at that speed. Angles as in :func:`reach_straight`.
    """
    t = tables.times_s.to(carrier_speed_mps.dtype)
    speed = target_speed_mps.clamp_min(1.0).unsqueeze(-1)
    radius = tables.min_turn_radius_m
    psi0 = torch.atan2(target_heading_sin, target_heading_cos).unsqueeze(-1)
    # Turning towards psi = 0 (straight away); sign(0) = 0 leaves a target already away as is.
    turn_sign = -torch.sign(psi0)
    omega = speed / radius
    t_turn = psi0.abs() / omega
    tau = torch.minimum(t, t_turn)
    psi = psi0 + turn_sign * omega * tau
    # Arc: integral of V·(cos psi, sin psi) dt with d psi/dt = s·omega, i.e. radius·s·(…).
    arc_along = torch.where(turn_sign != 0, turn_sign * radius * (psi.sin() - psi0.sin()), speed * tau)
    arc_across = torch.where(turn_sign != 0, turn_sign * radius * (psi0.cos() - psi.cos()), 0.0 * tau)
    run = speed * (t - t_turn).clamp_min(0)
    return _reach_from_path(tables, carrier_speed_mps, arc_along + run, arc_across)


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
    if obs.dim() != 2 or obs.shape[1] != layout.size:
        raise ValueError(f"obs must have shape (N, {layout.size}), got {tuple(obs.shape)}")
    f = obs.to(tables.distance_m.dtype)
    bc, bs = f[:, layout.index("enemy.bearing_cos")], f[:, layout.index("enemy.bearing_sin")]
    hc, hs = f[:, layout.index("enemy.rel_heading_cos")], f[:, layout.index("enemy.rel_heading_sin")]
    return reach_straight(
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
    )
