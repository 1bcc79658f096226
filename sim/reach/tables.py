"""The missile's true reach: tables measured by simulating shots with the model's own kernels.

A missile's reach is the longest launch range from which it still hits. It is not a distance
the missile flies: proportional navigation from a decelerating missile flies a curved path whose
steering costs it speed (induced drag), a target flying away or turning away bleeds speed, and
the missile is lost only once it falls below ``missile_min_speed_mps`` after burn-out or passes
its maximum flight time. No closed form gets all of that right, so the reach is *measured*: for
a grid of shooter speeds, target speeds and aspects, shots at many ranges are simulated in one
batch with :mod:`sim.physics` (guidance, the exact-turn integrator, the swept hit test, the loss
rules, all in the order of a physics step), and the largest range that hits is searched. Looking
a geometry up is then a trilinear interpolation, a few dozen elementwise ops for any number of
environments.

The shot, in the shooter's frame: the shooter sits at the origin flying along the line of sight
``+x`` at its speed and fires straight ahead; the missile starts ``launch_offset_m`` ahead with
the shooter's velocity. The target starts at range ``R`` on ``+x`` with heading ``aspect``
relative to the line of sight (0: flying straight away, π: straight at the shooter) and either

- **straight**: keeps heading and speed (throttle trimmed so thrust equals drag), or
- **escape**: turns away at full rudder and full throttle, the short way, until it flies along
  ``+x`` (away from the launch point; the last physics step takes just the rudder that lines it
  up), then flies straight on at full throttle.

The tables also keep when shots from shorter ranges hit, so the region a missile launched now
has caught by time ``t`` can be drawn (:func:`sim.reach.spacetime.reach_by_time`).

Tables are measured once per configuration and process (about a second of one CPU core).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sim.config import SimConfig
from sim.physics import aero_step, pn_rudder, swept_min_dist2

SHOOTER_SPEEDS_MPS = (150.0, 350.0, 550.0)
"""Shooter (carrier) speeds of the table; outside them the ends are used."""
TARGET_SPEEDS_MPS = tuple(float(v) for v in range(100, 551, 50))
"""Target speeds of the table; outside them the ends are used."""
ASPECT_COUNT = 19
"""Aspects 0, 10, ..., 180 degrees."""
MISS_TIME_S = 1e4
"""Hit time stored for a catch-point shot that missed (finite, so interpolation stays finite)."""
SEARCH_CANDIDATES = 8
"""Ranges tried per geometry in one pass of the search."""
SEARCH_PASSES = 3
"""Passes of the search; each narrows the bracket ``SEARCH_CANDIDATES``-fold."""


def target_thrust(config: SimConfig, speed_mps: torch.Tensor, escape: torch.Tensor) -> torch.Tensor:
    """The target's thrust acceleration: full when escaping, else trimmed to hold ``speed_mps``
    flying straight (thrust equals drag; full thrust above the top speed)."""
    fa = config.fighter
    trim = torch.clamp(fa.cd0 * speed_mps * speed_mps, max=fa.max_thrust_mps2)
    return torch.where(escape, torch.full_like(trim, fa.max_thrust_mps2), trim)


def target_step(
    config: SimConfig, px: torch.Tensor, py: torch.Tensor, vx: torch.Tensor, vy: torch.Tensor,
    escape: torch.Tensor, thrust: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One physics step of the target in the shot's frame: where ``escape`` (0 or 1) the rudder
    that turns its heading towards 0 (along ``+x``, away from the launch point), at most full;
    elsewhere rudder 0."""
    fa = config.fighter
    speed = torch.sqrt(vx * vx + vy * vy).clamp_min(1e-6)
    turn_gain = 1.0 / (fa.lift_factor * config.dt_s)
    rudder = escape * torch.clamp(-torch.atan2(vy, vx) * turn_gain / speed, -1.0, 1.0)
    return aero_step(px, py, vx, vy, rudder, thrust, fa, config.dt_s)


def target_paths(
    config: SimConfig, speed_mps: torch.Tensor, aspect_rad: torch.Tensor, escape: bool,
    times_s: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Displacement ``[B, T]`` along and across the line of sight of targets flying the shot's
    manoeuvre (straight, or the escape turn) from heading ``aspect_rad`` ``[B]`` at
    ``speed_mps`` ``[B]``, at the times ``[T]`` (rounded to physics steps)."""
    dtype = speed_mps.dtype
    px, py = torch.zeros_like(speed_mps), torch.zeros_like(speed_mps)
    vx, vy = speed_mps * aspect_rad.cos(), speed_mps * aspect_rad.sin()
    esc = torch.full_like(speed_mps, 1.0 if escape else 0.0)
    thrust = target_thrust(config, speed_mps, torch.full_like(speed_mps, escape, dtype=torch.bool))
    steps = torch.round(times_s.to(dtype) / config.dt_s).long().clamp_min(0)
    xs, ys = torch.zeros(speed_mps.shape[0], steps.shape[0], dtype=dtype), torch.zeros(
        speed_mps.shape[0], steps.shape[0], dtype=dtype)
    last = int(steps.max()) if steps.numel() else 0
    for step in range(last + 1):
        at = steps == step
        if bool(at.any()):
            xs[:, at], ys[:, at] = px.unsqueeze(1), py.unsqueeze(1)
        px, py, vx, vy = target_step(config, px, py, vx, vy, esc, thrust)
    return xs, ys


@dataclass(frozen=True)
class Shots:
    """Shots as the module docstring describes them, one per element of each ``[B]`` tensor."""

    shooter_speed_mps: torch.Tensor
    target_speed_mps: torch.Tensor
    aspect_rad: torch.Tensor
    """The target's heading relative to the line of sight (0: flying away)."""
    escape: torch.Tensor
    """Bool: the target turns away (else it flies straight on)."""
    range_m: torch.Tensor
    """Launch range."""


def simulate_shots(config: SimConfig, shots: Shots) -> torch.Tensor:
    """Hit time ``[B]`` in seconds (``inf`` for a miss) of ``shots``, simulated with the model's
    kernels as the module docstring describes."""
    range_m, escape = shots.range_m, shots.escape
    dtype = range_m.dtype
    dt, ma = config.dt_s, config.missile
    vs, vt = shots.shooter_speed_mps.to(dtype), shots.target_speed_mps.to(dtype)
    psi = shots.aspect_rad.to(dtype)
    b = range_m.shape[0]
    mpx = torch.full_like(range_m, config.launch_offset_m)
    mpy = torch.zeros_like(range_m)
    mvx, mvy = vs.clone(), torch.zeros_like(range_m)
    tpx, tpy = range_m.clone(), torch.zeros_like(range_m)
    tvx, tvy = vt * psi.cos(), vt * psi.sin()
    thrust_t = target_thrust(config, vt, escape)
    esc = escape.to(dtype)
    burning, coasting = torch.tensor(ma.max_thrust_mps2, dtype=dtype), torch.tensor(0.0, dtype=dtype)
    hit_time = torch.full((b,), math.inf, dtype=dtype)
    idx = torch.arange(b)
    alive = torch.ones(b, dtype=torch.bool)
    hit_r2, min_v2 = config.hit_radius_m**2, config.missile_min_speed_mps**2
    for step in range(config.max_flight_steps + 1):
        rud_m = pn_rudder(tpx - mpx, tpy - mpy, tvx - mvx, tvy - mvy, mvx, mvy, config.nav_constant, ma)
        tpx2, tpy2, tvx, tvy = target_step(config, tpx, tpy, tvx, tvy, esc, thrust_t)
        thrust_m = burning if step < config.burn_steps else coasting
        mpx2, mpy2, mvx, mvy = aero_step(mpx, mpy, mvx, mvy, rud_m, thrust_m, ma, dt)
        hit = alive & (swept_min_dist2(mpx - tpx, mpy - tpy, mpx2 - tpx2, mpy2 - tpy2) < hit_r2)
        mpx, mpy, tpx, tpy = mpx2, mpy2, tpx2, tpy2
        flown = step + 1  # the loss rules read the flight time after the step
        if flown > config.max_flight_steps:
            lost = torch.ones_like(hit)
        elif flown >= config.burn_steps:
            lost = mvx * mvx + mvy * mvy < min_v2
        else:
            lost = torch.zeros_like(hit)
        hit_time[idx[hit]] = flown * dt
        alive = alive & ~hit & ~lost
        if step % 10 == 9:
            left = int(alive.sum())
            if left == 0:
                break
            if left < 0.7 * alive.numel():
                keep = alive
                idx, alive = idx[keep], alive[keep]
                mpx, mpy, mvx, mvy, tpx, tpy, tvx, tvy, thrust_t, esc = (
                    t[keep] for t in (mpx, mpy, mvx, mvy, tpx, tpy, tvx, tvy, thrust_t, esc)
                )
    return hit_time


def search_reach(
    shots: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    count: int,
    high_m: torch.Tensor,
    candidates: int = SEARCH_CANDIDATES,
    passes: int = SEARCH_PASSES,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The largest hitting range ``[count]`` found by a bracketing search over ``(0, high_m]``.

    ``shots(geometry_index [B], range_m [B]) -> hit_time [B]`` simulates one shot per element.
    Each pass tries ``candidates`` evenly spaced ranges in the current bracket for every
    geometry at once and keeps the bracket above the largest one that hit. Returns the reach,
    its shot's hit time (``inf`` if nothing hit), and the first pass's ranges and hit times
    ``[count, candidates]`` (shots from evenly spaced fractions of ``high_m``).
    """
    lo = torch.zeros_like(high_m)
    hi = high_m.clone()
    k = torch.arange(1, candidates + 1, dtype=high_m.dtype)
    geometry = torch.arange(count).repeat_interleave(candidates)
    reach_time = torch.full_like(high_m, math.inf)
    first: tuple[torch.Tensor, torch.Tensor] | None = None
    for _ in range(passes):
        ranges = lo.unsqueeze(1) + (hi - lo).unsqueeze(1) * k / candidates
        hit_time = shots(geometry, ranges.reshape(-1)).view(count, candidates)
        if first is None:
            first = (ranges, hit_time)
        hits = torch.isfinite(hit_time)
        best = torch.where(hits, k, torch.zeros_like(k)).max(dim=1).values  # 0: none hit
        pick = (best.long() - 1).clamp_min(0).unsqueeze(1)
        reach_time = torch.where(best > 0, hit_time.gather(1, pick).squeeze(1), reach_time)
        step = (hi - lo) / candidates
        lo, hi = lo + step * best, lo + step * torch.clamp(best + 1, max=candidates)
    assert first is not None
    return lo, reach_time, first[0], first[1]


@dataclass(frozen=True)
class ReachTables:
    """Measured reach per shooter speed, target speed and aspect, straight and escaping target.

    Grids are evenly spaced; the first table axis ``[2]`` is (straight, escape).
    """

    shooter_speeds_mps: torch.Tensor
    """``[S]`` shooter speeds."""
    target_speeds_mps: torch.Tensor
    """``[V]`` target speeds."""
    aspects_rad: torch.Tensor
    """``[A]`` aspects from 0 (target flying away) to π (flying at the shooter)."""
    reach_m: torch.Tensor
    """``[2, S, V, A]`` reach against the target flying straight on at constant speed, and
    turning away at once (full rudder, full throttle)."""
    catch_range_m: torch.Tensor
    """``[2, S, V, A, K]`` launch ranges (increasing, the last one the reach) whose shots'
    hit times are in ``catch_time_s``."""
    catch_time_s: torch.Tensor
    """``[2, S, V, A, K]`` hit time of the shot from ``catch_range_m`` (``MISS_TIME_S``: a
    miss)."""

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> ReachTables:
        """A copy with every tensor on ``device`` (cast to ``dtype`` if given)."""
        dtype = dtype if dtype is not None else self.reach_m.dtype
        return ReachTables(*(t.to(device, dtype) for t in (
            self.shooter_speeds_mps, self.target_speeds_mps, self.aspects_rad,
            self.reach_m, self.catch_range_m, self.catch_time_s)))

    @staticmethod
    def _node(grid: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Lower node index and the upper node's weight on an even grid (clamped to its ends)."""
        n = grid.shape[0]
        pos = ((value.to(grid.dtype) - grid[0]) / (grid[1] - grid[0])).clamp(0, n - 1)
        lo = pos.floor().clamp(max=n - 2)
        return lo.long(), pos - lo

    def lookup(
        self,
        table: torch.Tensor,
        shooter_speed_mps: torch.Tensor,
        target_speed_mps: torch.Tensor,
        aspect_cos: torch.Tensor,
        aspect_sin: torch.Tensor,
    ) -> torch.Tensor:
        """Trilinear interpolation of ``table`` (``[S, V, A]`` or ``[S, V, A, E]``) at ``[N]``
        geometries, giving ``[N]`` or ``[N, E]``. The aspect is the target's heading relative to
        the line of sight, as cosine and sine (either sign of the sine: mirror images)."""
        i, wi = self._node(self.shooter_speeds_mps, shooter_speed_mps)
        j, wj = self._node(self.target_speeds_mps, target_speed_mps)
        k, wk = self._node(self.aspects_rad, torch.atan2(aspect_sin.abs(), aspect_cos))
        s, v, a = table.shape[:3]
        flat = table.reshape(s * v * a, -1)
        base = (i * v + j) * a + k
        out = torch.zeros((), dtype=table.dtype, device=table.device)
        for offset, w in (
            (0, (1 - wi) * (1 - wj)), (a, (1 - wi) * wj), (v * a, wi * (1 - wj)), (v * a + a, wi * wj)
        ):
            lo, hi = flat[base + offset], flat[base + offset + 1]
            out = out + w.unsqueeze(1) * (lo + (hi - lo) * wk.unsqueeze(1))
        return out.squeeze(1) if table.dim() == 3 else out


def _grid(values: tuple[float, ...]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def _kinematic_bound(config: SimConfig, vs: torch.Tensor, vt: torch.Tensor, psi: torch.Tensor) -> torch.Tensor:
    """An upper bound on the reach: a missile flying straight at full table speed to an
    interception point (no steering losses), live until its speed falls below the minimum."""
    m, dt = config.missile, config.dt_s
    v, x = vs.clone(), torch.zeros_like(vs)
    best = torch.zeros_like(vs)
    for step in range(config.max_flight_steps):
        v = v + ((m.max_thrust_mps2 if step < config.burn_steps else 0.0) - m.cd0 * v * v) * dt
        x = x + v * dt
        live = (v >= config.missile_min_speed_mps) | (step < config.burn_steps)
        t = (step + 1) * dt
        along, across = vt * t * psi.cos(), vt * t * psi.sin()
        d = x + config.launch_offset_m
        slack = d * d - across * across
        bound = torch.where(live & (slack >= 0), -along + slack.clamp_min(0).sqrt(), best)
        best = torch.maximum(best, bound)
    return best


def build_reach_tables(config: SimConfig) -> ReachTables:
    """Measure the tables for ``config`` (seconds of CPU; :func:`reach_tables` caches them)."""
    vs_grid, vt_grid = _grid(SHOOTER_SPEEDS_MPS), _grid(TARGET_SPEEDS_MPS)
    aspects = torch.linspace(0.0, math.pi, ASPECT_COUNT, dtype=torch.float64)
    vs, vt, psi = (g.reshape(-1) for g in torch.meshgrid(vs_grid, vt_grid, aspects, indexing="ij"))
    vs, vt, psi = (torch.cat([g, g]) for g in (vs, vt, psi))
    n = vs.shape[0]
    escape = torch.arange(n) >= n // 2
    dtype = torch.float32

    def shots(geometry: torch.Tensor, range_m: torch.Tensor) -> torch.Tensor:
        return simulate_shots(config, Shots(vs[geometry], vt[geometry], psi[geometry], escape[geometry],
                                            range_m.to(dtype)))

    high = (_kinematic_bound(config, vs, vt, psi) * 1.1 + 3_000.0).to(dtype)
    reach, reach_time, ranges, times = search_reach(shots, n, high)
    # Catch points: the first pass's shots below the reach, then the reach itself.
    below = ranges < reach.unsqueeze(1)
    catch_range = torch.cat([torch.where(below, ranges, reach.unsqueeze(1)), reach.unsqueeze(1)], 1)
    catch_time = torch.cat([torch.where(below, times, reach_time.unsqueeze(1)), reach_time.unsqueeze(1)], 1)
    catch_time = torch.where(torch.isfinite(catch_time), catch_time, MISS_TIME_S)
    shape = (2, vs_grid.shape[0], vt_grid.shape[0], ASPECT_COUNT)
    return ReachTables(
        vs_grid.to(dtype), vt_grid.to(dtype), aspects.to(dtype), reach.view(shape),
        catch_range.view(*shape, -1), catch_time.view(*shape, -1),
    )


NOT_READ_BY_THE_SHOTS = ("dtype", "obs_reach", "obs_history", "obs_trace_s", "max_time_s", "spawn_separation_m", "scenario")
"""Config fields the simulated shots never read: configs differing only in these share tables
(a sim with the reach block, and the copy of it that sizes its memory, measure them once)."""


def reach_tables(config: SimConfig) -> ReachTables:
    """The reach tables for ``config`` (float32, CPU), measured once per process for each set of
    values of the fields the shots read."""
    base = SimConfig()
    return _measured_reach_tables(config.replace(**{k: getattr(base, k) for k in NOT_READ_BY_THE_SHOTS}))


def clear_reach_tables() -> None:
    """Forget the measured tables (the next :func:`reach_tables` measures again)."""
    _measured_reach_tables.cache_clear()


@functools.lru_cache(maxsize=8)
def _measured_reach_tables(config: SimConfig) -> ReachTables:
    """:func:`build_reach_tables`, cached.

    Measured on one thread: the shots are thousands of small elementwise ops, which run faster
    without intra-op threads (and far faster on a busy machine, where those threads wait on
    each other).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return build_reach_tables(config)
    finally:
        torch.set_num_threads(threads)
