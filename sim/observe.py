"""The egocentric observation builder, for both sides at once (layout in sim/layout.py)."""

from __future__ import annotations

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
from sim.reach.missile import MissileTables, cached_tables
from sim.reach.spacetime import reach_observation
from sim.state import SimState


def _norm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.clamp(torch.sqrt(x * x + y * y), min=NORM_EPS)


def _nearest(
    key: torch.Tensor, active: torch.Tensor, count: int, fields: list[torch.Tensor], fused: bool
) -> torch.Tensor:
    """Fields ``[2, count · F, N]`` (entry-major) of the ``count`` active slots with the smallest
    key (ties by slot index); entries past the number of active slots are zero.

    ``key``, ``active`` and every field are ``[2, M, N]``. Two exact implementations: a stable
    sort and a gather (fewest eager kernels), or ranks from pairwise comparisons and a masked
    sum over the M slots (pure elementwise work that ``torch.compile`` fuses into one loop).
    """
    k = torch.where(active, key, torch.full_like(key, float("inf")))
    if not fused:
        order = torch.sort(k, dim=1, stable=True).indices[:, :count]  # [2, count, N]
        table = torch.stack(fields, dim=2)  # [2, M, F, N]
        index = order.unsqueeze(2).expand(-1, -1, table.shape[2], -1)
        picked = torch.gather(table, 1, index)  # [2, count, F, N]
        present = torch.gather(active, 1, order).unsqueeze(2)
        return torch.where(present, picked, torch.zeros_like(picked)).flatten(1, 2)
    m = key.shape[1]
    ki, kj = k.unsqueeze(2), k.unsqueeze(1)  # [2, M, 1, N], [2, 1, M, N]
    idx = torch.arange(m, device=key.device)
    j_first = (idx.view(1, m) < idx.view(m, 1)).view(1, m, m, 1)  # [i, j]: j < i
    rank = ((kj < ki) | ((kj == ki) & j_first)).sum(2)  # [2, M, N]
    out: list[torch.Tensor] = []
    zero = torch.zeros_like(key)
    for c in range(count):
        sel = (rank == c) & active
        out.extend(torch.where(sel, f, zero).sum(1) for f in fields)
    return torch.stack(out, dim=1)


def build_obs(
    state: SimState, config: SimConfig, fused: bool = False, tables: MissileTables | None = None
) -> torch.Tensor:
    """Observations ``[N, 2, D]``: ``[:, s]`` is side ``s``'s view (see sim/layout.py).

    ``fused`` picks the missile-selection form meant for ``torch.compile`` (same values).
    ``tables`` (on the state's device, its dtype) feed the ``reach`` block when
    ``config.obs_reach``; by default the process's cached ones are used.
    """
    s = state
    dtype = s.f_px.dtype
    half = config.arena_half_width_m
    mpf = float(config.missiles_per_fighter)

    # Own fighter, [2, N] per field.
    speed_o = _norm(s.f_vx, s.f_vy)
    nx, ny = s.f_vx / speed_o, s.f_vy / speed_o
    lx, ly = -ny, nx  # own left normal
    if config.cooldown_steps == 0:
        ready = torch.ones_like(s.f_px)
    else:
        ready = torch.clamp(s.f_since_launch.to(dtype) / config.cooldown_steps, max=1.0)
    alive = s.f_alive.to(dtype)
    ammo = s.f_ammo.to(dtype) / mpf
    own = torch.stack(
        [s.f_px / half, s.f_py / half, nx, ny, speed_o / SPEED_SCALE_MPS, ammo, ready, alive,
         s.f_throttle, s.f_rudder],
        dim=1,
    )

    # The enemy of side s is fighter 1 - s.
    ex, ey = s.f_px.flip(0), s.f_py.flip(0)
    evx, evy = s.f_vx.flip(0), s.f_vy.flip(0)
    enx, eny = nx.flip(0), ny.flip(0)
    rx, ry = ex - s.f_px, ey - s.f_py
    rng = _norm(rx, ry)
    wx, wy = evx - s.f_vx, evy - s.f_vy
    enemy = torch.stack(
        [
            alive.flip(0),
            rng / RANGE_SCALE_M,
            (rx * nx + ry * ny) / rng,
            (rx * lx + ry * ly) / rng,
            enx * nx + eny * ny,
            enx * lx + eny * ly,
            speed_o.flip(0) / SPEED_SCALE_MPS,
            -(rx * wx + ry * wy) / rng / CLOSING_SCALE_MPS,
            ammo.flip(0),
            -(rx * enx + ry * eny) / rng,
        ],
        dim=1,
    )

    # Incoming: the enemy's missiles seen from the own fighter, [2 (observer), M, N].
    mpx, mpy = s.m_px.flip(0), s.m_py.flip(0)
    mvx, mvy = s.m_vx.flip(0), s.m_vy.flip(0)
    m_speed = _norm(mvx, mvy)
    opx, opy, ovx, ovy = (t.unsqueeze(1) for t in (s.f_px, s.f_py, s.f_vx, s.f_vy))
    onx, ony, olx, oly = (t.unsqueeze(1) for t in (nx, ny, lx, ly))
    dx, dy = opx - mpx, opy - mpy
    dist = _norm(dx, dy)
    mnx, mny = mvx / m_speed, mvy / m_speed
    cvx, cvy = ovx - mvx, ovy - mvy
    in_active = s.m_active.flip(0)
    incoming = _nearest(
        dist,
        in_active,
        config.obs_incoming_missiles,
        fused=fused,
        fields=[
            torch.ones_like(dist),
            dist / RANGE_SCALE_M,
            -(dx * onx + dy * ony) / dist,
            -(dx * olx + dy * oly) / dist,
            mnx * onx + mny * ony,
            mnx * olx + mny * oly,
            m_speed / MISSILE_SPEED_SCALE_MPS,
            -(dx * cvx + dy * cvy) / dist / CLOSING_SCALE_MPS,
            (s.m_steps.flip(0) < config.burn_steps).to(dtype),
        ],
    )

    # Own missiles, described against their target (the enemy fighter).
    qx, qy = ex.unsqueeze(1) - s.m_px, ey.unsqueeze(1) - s.m_py
    qd = _norm(qx, qy)
    qvx, qvy = evx.unsqueeze(1) - s.m_vx, evy.unsqueeze(1) - s.m_vy
    own_missiles = _nearest(
        qd,
        s.m_active,
        config.obs_own_missiles,
        fused=fused,
        fields=[
            torch.ones_like(qd),
            qd / RANGE_SCALE_M,
            _norm(s.m_vx, s.m_vy) / MISSILE_SPEED_SCALE_MPS,
            -(qx * qvx + qy * qvy) / qd / CLOSING_SCALE_MPS,
            s.m_steps.to(dtype) * (config.dt_s / config.missile_max_flight_time_s),
            (s.m_steps < config.burn_steps).to(dtype),
        ],
    )

    t = s.physics_steps.to(dtype) * config.dt_s
    time_left = torch.clamp(1.0 - t / config.max_time_s, min=0.0)
    blocks = [own, enemy, incoming, own_missiles, time_left.view(1, 1, -1).expand(2, 1, -1)]
    if config.obs_reach:
        if tables is None:
            tables = cached_tables(config, str(s.f_px.device), config.dtype)
        blocks.append(torch.stack(reach_observation(tables, rx, ry, s.f_vx, s.f_vy, evx, evy), dim=1))
    obs = torch.cat(blocks, dim=1)  # [2, D, N]
    return torch.clamp(obs, -OBS_CLIP, OBS_CLIP).permute(2, 0, 1)


def observe_into(
    state: SimState,
    config: SimConfig,
    out: torch.Tensor,
    fused: bool = False,
    fresh: torch.Tensor | None = None,
    previous: torch.Tensor | None = None,
    tables: MissileTables | None = None,
) -> None:
    """Write the observations into ``out`` (``[N, 2, D]``); with ``fresh`` (bool ``[N]``) and
    ``previous``, only the ``fresh`` environments take new observations.

    Compiled, the transposition into the environment-major buffer fuses into the kernels that
    compute the fields, instead of a separate strided copy (half the observation time).
    """
    obs = build_obs(state, config, fused=fused, tables=tables)
    if fresh is not None and previous is not None:
        obs = torch.where(fresh.view(-1, 1, 1), obs, previous)
    out.copy_(obs)
