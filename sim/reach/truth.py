"""Ground truth for the reach model (sim/reach/tables.py): shots fired in the batched simulator itself.

For each geometry, shots from many ranges are fired at once in one :class:`~sim.BatchedSim`
(continuous actions, one physics step per decision so the target's manoeuvre is flown step by
step), and the largest range that hits is searched. Nothing of the reach model is used: the
shooter fires through the sim's own launch rule, the missile is guided, moved, tested for hits
and lost by the sim's kernels, and the whole picture is rotated by a different angle per
geometry, so a frame-dependent slip would show.

The target flies the manoeuvres of sim/reach/tables.py: straight at constant speed (throttle trimmed
so thrust equals drag), or turning away at full rudder and full throttle the short way until it
flies away from the launch point along the line of sight at launch, then straight on.
"""

from __future__ import annotations

import math

import torch

from sim.batched import BatchedSim
from sim.config import SimConfig
from sim.reach.tables import Shots, search_reach


def truth_config(config: SimConfig) -> SimConfig:
    """``config`` set up for measuring shots: continuous actions, one physics step per
    decision, one missile per side, an arena no shot leaves, episodes longer than a flight."""
    return config.replace(
        substeps=1, time_scale=1.0, action_mode="continuous", missiles_per_fighter=1,
        obs_incoming_missiles=1, obs_own_missiles=1, arena_half_width_m=1e7,
        max_time_s=config.missile_max_flight_time_s + 5.0,
    )


def fire_shots(config: SimConfig, shots: Shots) -> torch.Tensor:
    """Hit time ``[B]`` (s; ``inf`` for a miss) of ``shots``, each in its own environment of
    one batched sim."""
    cfg = truth_config(config)
    b = int(shots.range_m.shape[0])
    sim = BatchedSim(b, cfg, seed=0)
    sim.reset()
    s, dtype = sim.state, sim.dtype
    los = torch.arange(b, dtype=torch.float64) * 0.7  # a different world frame per shot
    ux, uy = los.cos(), los.sin()
    vs, vt = shots.shooter_speed_mps.double(), shots.target_speed_mps.double()
    heading = los + shots.aspect_rad.double()
    rng = shots.range_m.double()
    for name, value in (
        ("f_px", torch.stack([torch.zeros(b, dtype=torch.float64), rng * ux])),
        ("f_py", torch.stack([torch.zeros(b, dtype=torch.float64), rng * uy])),
        ("f_vx", torch.stack([vs * ux, vt * heading.cos()])),
        ("f_vy", torch.stack([vs * uy, vt * heading.sin()])),
    ):
        getattr(s, name).copy_(value.to(dtype))
    fa = cfg.fighter
    trim = (fa.cd0 * torch.stack([vs, vt]) ** 2 / fa.max_thrust_mps2).clamp(max=1.0).to(dtype)
    esc = shots.escape.to(torch.bool)
    uxf, uyf = ux.to(dtype), uy.to(dtype)
    actions = torch.zeros(b, 2, 3, dtype=dtype)
    actions[:, 0, 2] = 1.0  # fire at once
    hit_time = torch.full((b,), math.inf, dtype=torch.float64)
    resolved = torch.zeros(b, dtype=torch.bool)
    for step in range(cfg.max_flight_steps + 2):
        vx, vy = s.f_vx[1], s.f_vy[1]
        off_los = torch.atan2(uxf * vy - uyf * vx, uxf * vx + uyf * vy)
        speed = torch.sqrt(vx * vx + vy * vy).clamp_min(1e-6)
        turn = torch.clamp(-off_los / (speed * fa.lift_factor * cfg.dt_s), -1.0, 1.0)
        actions[:, 1, 0] = torch.where(esc, turn, torch.zeros_like(turn))
        actions[:, 1, 1] = torch.where(esc, torch.ones_like(turn), trim[1])
        actions[:, 0, 1] = trim[0]
        out = sim.step(actions)
        actions[:, 0, 2] = 0.0
        hit = (out.hits[:, 0] > 0) & ~resolved
        hit_time[hit] = (step + 1) * cfg.dt_s
        # A shot is over when it hit, or when its missile is gone (its episode may have ended
        # and restarted: the new episode fires nothing).
        resolved |= hit | ~s.m_active[0, 0] | out.done
        if step % 10 == 9 and bool(resolved.all()):
            break
    return hit_time


def measure_reach(
    config: SimConfig,
    shooter_speed_mps: torch.Tensor,
    target_speed_mps: torch.Tensor,
    aspect_rad: torch.Tensor,
    escape: torch.Tensor,
    high_m: float = 120_000.0,
    candidates: int = 16,
    passes: int = 3,
) -> torch.Tensor:
    """The largest launch range ``[G]`` (m) that hits, per geometry, to within
    ``high_m / candidates ** passes`` (29 m by default): shots at ``candidates`` ranges per
    geometry and pass, all geometries in one sim (see :func:`fire_shots`)."""
    g = int(shooter_speed_mps.shape[0])

    def shots(geometry: torch.Tensor, range_m: torch.Tensor) -> torch.Tensor:
        return fire_shots(config, Shots(shooter_speed_mps[geometry], target_speed_mps[geometry],
                                        aspect_rad[geometry], escape[geometry], range_m))

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of small ops: one thread is faster (bench/RESULTS.md)
    try:
        high = torch.full((g,), float(high_m), dtype=torch.float64)
        return search_reach(shots, g, high, candidates, passes)[0]
    finally:
        torch.set_num_threads(threads)
