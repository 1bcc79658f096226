"""Missile tables: distance flown and speed against time of a missile launched straight.

For a range of carrier speeds, a missile launched straight (rudder 0) is integrated with the
model's own law and physics step (``SimConfig.missile``, ``dt_s``, ``missile_burn_time_s``) and
sampled every ``sample_dt_s``; the tables carry the measured reach tables of
:mod:`sim.reach.tables` for the same configuration, which the reach and escape estimates of
:mod:`sim.reach.spacetime` look up. :func:`cached_tables` builds them once per process.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from sim.config import SimConfig
from sim.reach.tables import ReachTables, reach_tables

SPENT_SPEED_MPS = 340.0
"""Mach 1: an inbound missile slower than this is no longer worth defending against (the
``crank`` opponent's rule). The sim itself loses a missile only below ``missile_min_speed_mps``
(200 m/s by default) after burn-out, which is what the tables and the reach use."""

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


@functools.lru_cache(maxsize=16)
def cached_tables(config: SimConfig, device: str = "cpu", dtype: str = "float32") -> MissileTables:
    """:func:`missile_tables` for ``config`` on ``device`` as ``dtype``, built once per process."""
    return missile_tables(config).to(device, getattr(torch, dtype))
