"""Predicted paths tabulated once per sim config, so the live spacetime graph costs milliseconds.

The spacetime graph's regions and paths (:mod:`sim.reach.threat`) integrate fighters' paths
step by step over the whole horizon: about a second of CPU per moment, far too slow to redraw
at every decision of a live fight. The paths depend on the moment only through a fighter's
speed, its heading against a line of sight and its controls, and the physics is the same under
any rotation, so they are computed once, with the model's own functions, over a grid of those
and looked up:

- :class:`TargetPathTable`: :func:`sim.reach.tables.target_paths` (a target flying straight on
  or turning away from a launch) over speeds every ``SPEED_STEP_MPS`` and aspects on the grid
  of :func:`sim.reach.threat.threat_region`'s bearings; a call is interpolated linearly in
  speed and in aspect (exact rows where the aspect is on the grid, as it is for every bearing
  of a region drawn with the target heading along +x). It has ``target_paths``' signature, so
  it is passed to ``threat_region`` and ``escape_path`` as their ``paths``;
- :class:`HoldPathTable`: :func:`sim.reach.threat.hold_path` (holding rudder and throttle) for
  the discrete rudder and throttle levels over the same speeds, interpolated in speed and
  rotated to the fighter's heading.

A call outside a table (a speed beyond ``SPEED_MAX_MPS``, times off the table's grid, other
controls) falls back to the exact function, so a lookup is never extrapolated.
"""

from __future__ import annotations

import math

import torch

from sim.actions import RUDDER_LEVELS, THROTTLE_LEVELS
from sim.config import SimConfig
from sim.physics import aero_step
from sim.reach.tables import target_paths
from sim.reach.threat import hold_path

F64 = torch.float64
SPEED_STEP_MPS = 10.0
"""Spacing of the tables' speeds; paths change smoothly with speed, so linear interpolation
between rows 10 m/s apart moves a point by metres over a minute."""
SPEED_MAX_MPS = 700.0
"""The tables cover speeds 0 to this (faster than any fighter of the default config)."""


def _speed_weights(speeds: torch.Tensor, speed_mps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Lower row index and weight of the upper row for each speed (inside the table)."""
    pos = (speed_mps.to(F64) / SPEED_STEP_MPS).clamp(0, speeds.shape[0] - 1)
    lo = pos.floor().long().clamp(max=speeds.shape[0] - 2)
    return lo, (pos - lo.to(F64)).unsqueeze(-1)


def _time_columns(grid_s: torch.Tensor, times_s: torch.Tensor) -> torch.Tensor | None:
    """Columns of ``grid_s`` holding ``times_s``, or None if any time is off the grid."""
    step = float(grid_s[1] - grid_s[0])
    idx = torch.round(times_s.to(F64) / step).long()
    if bool(((idx < 0) | (idx >= grid_s.shape[0])).any()):
        return None
    if not torch.allclose(grid_s[idx], times_s.to(F64), atol=1e-9, rtol=0):
        return None
    return idx


class TargetPathTable:
    """:func:`sim.reach.tables.target_paths` for one config, tabulated (module docstring)."""

    def __init__(self, config: SimConfig, times_s: torch.Tensor, bearings: int) -> None:
        self.config = config
        self.times_s = times_s.to(F64)
        self.speeds = torch.arange(0.0, SPEED_MAX_MPS + 1e-9, SPEED_STEP_MPS, dtype=F64)
        self.aspects = torch.linspace(-math.pi, math.pi, bearings + 1, dtype=F64)
        s, a = self.speeds.shape[0], self.aspects.shape[0]
        speed = self.speeds.repeat_interleave(a)
        aspect = self.aspects.repeat(s)
        self.tables: dict[bool, tuple[torch.Tensor, torch.Tensor]] = {}
        for escape in (False, True):
            along, across = target_paths(config, speed, aspect, escape, self.times_s)
            self.tables[escape] = (along.view(s, a, -1), across.view(s, a, -1))

    def __call__(self, config: SimConfig, speed_mps: torch.Tensor, aspect_rad: torch.Tensor, escape: bool,
                 times_s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``target_paths(config, speed_mps, aspect_rad, escape, times_s)``, from the table
        where it holds them."""
        cols = _time_columns(self.times_s, times_s)
        if (config != self.config or cols is None or bool((speed_mps > SPEED_MAX_MPS).any())
                or bool((speed_mps < 0).any())):
            return target_paths(config, speed_mps, aspect_rad, escape, times_s)
        lo, w = _speed_weights(self.speeds, speed_mps)
        step = 2 * math.pi / (self.aspects.shape[0] - 1)
        wrapped = torch.remainder(aspect_rad.to(F64) + math.pi, 2 * math.pi)  # [0, 2π)
        apos = wrapped / step
        alo = apos.floor().long().clamp(0, self.aspects.shape[0] - 2)
        aw = (apos - alo.to(F64)).clamp(0, 1).unsqueeze(-1)
        out = []
        for table in self.tables[bool(escape)]:
            t = table[:, :, cols]

            def at(si: torch.Tensor, ai: torch.Tensor, t: torch.Tensor = t) -> torch.Tensor:
                return t[si, ai]

            low = at(lo, alo) * (1 - aw) + at(lo, alo + 1) * aw
            high = at(lo + 1, alo) * (1 - aw) + at(lo + 1, alo + 1) * aw
            out.append(low * (1 - w) + high * w)
        return out[0], out[1]


class HoldPathTable:
    """:func:`sim.reach.threat.hold_path` for one config at the discrete rudder and throttle
    levels, tabulated (module docstring)."""

    def __init__(self, config: SimConfig, times_s: torch.Tensor) -> None:
        self.config = config
        self.times_s = times_s.to(F64)
        self.speeds = torch.arange(0.0, SPEED_MAX_MPS + 1e-9, SPEED_STEP_MPS, dtype=F64)
        controls = [(r, t) for r in RUDDER_LEVELS for t in THROTTLE_LEVELS]
        self.controls = {c: i for i, c in enumerate(controls)}
        s, c = self.speeds.shape[0], len(controls)
        # Every speed and control at once, heading +x from the origin (one integration).
        vx = self.speeds.repeat(c)
        rudder = torch.tensor([r for r, _ in controls], dtype=F64).repeat_interleave(s)
        thrust = torch.tensor([t for _, t in controls], dtype=F64).repeat_interleave(s) * config.fighter.max_thrust_mps2
        px, py, vy = torch.zeros_like(vx), torch.zeros_like(vx), torch.zeros_like(vx)
        steps = torch.round(self.times_s / config.dt_s).long()
        xs = torch.zeros(vx.shape[0], steps.shape[0], dtype=F64)
        ys = torch.zeros_like(xs)
        for step in range(int(steps.max()) + 1):
            at = steps == step
            if bool(at.any()):
                xs[:, at], ys[:, at] = px.unsqueeze(1), py.unsqueeze(1)
            px, py, vx, vy = aero_step(px, py, vx, vy, rudder, thrust, config.fighter, config.dt_s)
        self.x, self.y = xs.view(c, s, -1), ys.view(c, s, -1)

    def path(self, x: float, y: float, vx: float, vy: float, rudder: float, throttle: float,
             times_s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``hold_path(config, x, y, vx, vy, rudder, throttle, times_s)``, from the table where
        it holds it."""
        speed = math.hypot(vx, vy)
        cols = _time_columns(self.times_s, times_s)
        control = self.controls.get((float(rudder), float(throttle)))
        if cols is None or control is None or speed > SPEED_MAX_MPS:
            return hold_path(self.config, x, y, vx, vy, rudder, throttle, times_s)
        lo, w = _speed_weights(self.speeds, torch.tensor([speed], dtype=F64))
        i = int(lo[0])
        wt = float(w[0, 0])
        px = self.x[control, i, cols] * (1 - wt) + self.x[control, i + 1, cols] * wt
        py = self.y[control, i, cols] * (1 - wt) + self.y[control, i + 1, cols] * wt
        c, s = (vx / speed, vy / speed) if speed > 0 else (1.0, 0.0)
        return x + px * c - py * s, y + px * s + py * c
