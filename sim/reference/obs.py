"""The scalar reference's observation builder, field by field from ``sim/layout.py``.

Plain Python floats; the batched observation must match it to 1e-4. Norms used as divisors are
floored at ``NORM_EPS`` and the whole vector is clamped to ``[-OBS_CLIP, OBS_CLIP]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from sim.config import SimConfig
from sim.layout import (
    CLOSING_SCALE_MPS,
    MISSILE_SPEED_SCALE_MPS,
    NORM_EPS,
    OBS_CLIP,
    RANGE_SCALE_M,
    SPEED_SCALE_MPS,
)
from sim.reach.missile import cached_tables
from sim.reach.spacetime import reach_observation
from sim.reference.state import ReferenceFighter, ReferenceMissile


def _nearest_active(
    missiles: Sequence[ReferenceMissile], point: Sequence[float]
) -> list[tuple[float, float, float, ReferenceMissile]]:
    """``(distance, dx, dy, missile)`` of the active ``missiles``, ``(dx, dy)`` from each missile
    to ``point``, nearest first; equal distances keep slot order (the sort is stable)."""
    found = []
    for m in missiles:
        if m.active:
            dx, dy = point[0] - m.pos[0], point[1] - m.pos[1]
            found.append((math.hypot(dx, dy), dx, dy, m))
    found.sort(key=lambda t: t[0])
    return found


def observe_side(
    cfg: SimConfig,
    o: ReferenceFighter,
    e: ReferenceFighter,
    own_missiles: Sequence[ReferenceMissile],
    enemy_missiles: Sequence[ReferenceMissile],
    physics_steps: int,
) -> list[float]:
    """The egocentric observation of fighter ``o`` facing enemy ``e`` (``layout.size`` floats)."""
    burn, mpf = cfg.burn_steps, cfg.missiles_per_fighter
    o_speed = math.hypot(o.vel[0], o.vel[1])
    inv = 1.0 / max(o_speed, NORM_EPS)
    nx, ny = o.vel[0] * inv, o.vel[1] * inv  # body x axis; body y axis is (−ny, nx)

    def body(dx: float, dy: float) -> tuple[float, float]:
        return dx * nx + dy * ny, -dx * ny + dy * nx

    ready = 1.0 if cfg.cooldown_steps == 0 else min(o.since_launch_steps / cfg.cooldown_steps, 1.0)
    obs = [
        o.pos[0] / cfg.arena_half_width_m, o.pos[1] / cfg.arena_half_width_m, nx, ny,
        o_speed / SPEED_SCALE_MPS, o.missiles_left / mpf, ready, float(o.alive),
        o.throttle, o.rudder,
    ]
    # Enemy block.
    rx, ry = e.pos[0] - o.pos[0], e.pos[1] - o.pos[1]
    r = math.hypot(rx, ry)
    rn = max(r, NORM_EPS)
    e_speed = math.hypot(e.vel[0], e.vel[1])
    e_inv = 1.0 / max(e_speed, NORM_EPS)
    enx, eny = e.vel[0] * e_inv, e.vel[1] * e_inv
    bx, by = body(rx / rn, ry / rn)
    hx, hy = body(enx, eny)
    closing = -(rx * (e.vel[0] - o.vel[0]) + ry * (e.vel[1] - o.vel[1])) / rn
    nose_on = -(rx * enx + ry * eny) / rn
    obs += [
        float(e.alive), r / RANGE_SCALE_M, bx, by, hx, hy, e_speed / SPEED_SCALE_MPS,
        closing / CLOSING_SCALE_MPS, e.missiles_left / mpf, nose_on,
    ]
    # Incoming: the enemy's active missiles, nearest to o first, ties by slot index.
    incoming = _nearest_active(enemy_missiles, o.pos)[: cfg.obs_incoming_missiles]
    for d, dx, dy, m in incoming:
        dn = max(d, NORM_EPS)
        m_speed = math.hypot(m.vel[0], m.vel[1])
        m_inv = 1.0 / max(m_speed, NORM_EPS)
        bcos, bsin = body(-dx / dn, -dy / dn)
        hcos, hsin = body(m.vel[0] * m_inv, m.vel[1] * m_inv)
        closing = -(dx * (o.vel[0] - m.vel[0]) + dy * (o.vel[1] - m.vel[1])) / dn
        obs += [
            1.0, d / RANGE_SCALE_M, bcos, bsin, hcos, hsin, m_speed / MISSILE_SPEED_SCALE_MPS,
            closing / CLOSING_SCALE_MPS, float(m.flight_steps < burn),
        ]
    obs += [0.0] * 9 * (cfg.obs_incoming_missiles - len(incoming))
    # Own missiles in flight, nearest to the enemy first, ties by slot index.
    own = _nearest_active(own_missiles, e.pos)[: cfg.obs_own_missiles]
    for q, qx, qy, m in own:
        qn = max(q, NORM_EPS)
        closing = -(qx * (e.vel[0] - m.vel[0]) + qy * (e.vel[1] - m.vel[1])) / qn
        obs += [
            1.0, q / RANGE_SCALE_M, math.hypot(m.vel[0], m.vel[1]) / MISSILE_SPEED_SCALE_MPS,
            closing / CLOSING_SCALE_MPS,
            m.flight_steps * cfg.dt_s / cfg.missile_max_flight_time_s,
            float(m.flight_steps < burn),
        ]
    obs += [0.0] * 6 * (cfg.obs_own_missiles - len(own))
    obs.append(max(1.0 - physics_steps * cfg.dt_s / cfg.max_time_s, 0.0))
    if cfg.obs_reach:
        # The reach block is a table lookup (sim/reach/spacetime.py), fed here from this state.
        tables = cached_tables(cfg, "cpu", "float64")
        block = reach_observation(tables, *(torch.tensor([v], dtype=torch.float64) for v in (
            rx, ry, o.vel[0], o.vel[1], e.vel[0], e.vel[1])))
        obs += [float(v) for v in block]
    return [min(max(v, -OBS_CLIP), OBS_CLIP) for v in obs]
