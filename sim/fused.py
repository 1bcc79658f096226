"""The physics of a whole decision step as one Triton kernel: every environment's state read
once, its physics steps taken in registers, written once.

The torch path (sim/kernels.py) runs each physics step as several kernels, each reading its
inputs from memory and writing its results back; on a GPU that traffic is the step's cost (at
N = 2^22 on an H200 the compiled step spends 29.8 ms of kernels per decision, where the state it
touches, moved once, would take about 3 ms: bench/RESULTS.md, "Third GPU hold"). This kernel
does what :func:`sim.kernels.physics_substep` (``physics_steps_per_decision`` times) and
:func:`sim.kernels.finish_decision` do, in the same order of operations, one block of
environments per program with each side's missile slots as a ``[BLOCK, M]`` tile.

It runs on CUDA devices, and on the CPU under Triton's interpreter (``TRITON_INTERPRET=1``),
which is how the test suite checks it against the torch path. ``float32`` only.
"""

from __future__ import annotations

import os

import torch

from sim.config import SimConfig
from sim.kernels import (
    END_AMMO_OUT,
    END_KILL,
    END_MUTUAL_KILL,
    END_OUT_OF_ARENA,
    END_TIME_LIMIT,
    WINNER_BLUE,
    WINNER_DRAW,
    WINNER_NONE,
    WINNER_RED,
    DecisionAccumulators,
)
from sim.state import SimState

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU build of torch comes without Triton
    triton = None


def unsupported(config: SimConfig, device: torch.device) -> str | None:
    """Why the fused kernel cannot step ``config`` on ``device``, or None if it can."""
    if triton is None:
        return "Triton is not installed"
    if config.dtype != "float32":
        return f"it computes in float32, not {config.dtype}"
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "on the CPU it runs only under Triton's interpreter (TRITON_INTERPRET=1)"
    if device.type not in ("cpu", "cuda"):
        return f"it runs on CUDA devices, not {device.type}"
    return None


if triton is not None:
    # Globals read inside a kernel must be constexpr for Triton's compiler.
    _NONE = tl.constexpr(WINNER_NONE)
    _RED = tl.constexpr(WINNER_RED)
    _BLUE = tl.constexpr(WINNER_BLUE)
    _DRAW = tl.constexpr(WINNER_DRAW)
    _KILL = tl.constexpr(END_KILL)
    _MUTUAL = tl.constexpr(END_MUTUAL_KILL)
    _OUT = tl.constexpr(END_OUT_OF_ARENA)
    _AMMO = tl.constexpr(END_AMMO_OUT)
    _TIME = tl.constexpr(END_TIME_LIMIT)

    @triton.jit
    def _load2(ptr, off0, off1, mask, other):
        """Side 0's and side 1's values of a ``[2, ...]`` tensor."""
        return tl.load(ptr + off0, mask=mask, other=other), tl.load(ptr + off1, mask=mask, other=other)

    @triton.jit
    def _store2(ptr, off0, off1, x0, x1, mask):
        tl.store(ptr + off0, x0, mask=mask)
        tl.store(ptr + off1, x1, mask=mask)

    @triton.jit
    def _aero(px, py, vx, vy, rudder, thrust, dt, C: tl.constexpr, CD0: tl.constexpr, K: tl.constexpr):
        # sim.physics.aero_step
        v2 = vx * vx + vy * vy
        speed = tl.sqrt(v2)
        inv = tl.math.rsqrt(tl.maximum(v2, 1e-12))
        nx = vx * inv
        ny = vy * inv
        angle = speed * (C * dt) * rudder
        ca = tl.cos(angle)
        sa = tl.sin(angle)
        nx2 = nx * ca - ny * sa
        ny2 = nx * sa + ny * ca
        lift = tl.abs(rudder) * C
        drag = (CD0 + K * lift * lift) * speed * speed
        speed2 = speed + (thrust - drag) * dt
        vx2 = nx2 * speed2
        vy2 = ny2 * speed2
        return px + vx2 * dt, py + vy2 * dt, vx2, vy2

    @triton.jit
    def _pn(rx, ry, wx, wy, vx, vy, NAV: tl.constexpr, C: tl.constexpr):
        # sim.physics.pn_rudder
        r2 = tl.maximum(rx * rx + ry * ry, 1e-6)
        lam_dot = (rx * wy - ry * wx) / r2
        closing = -(rx * wx + ry * wy) * tl.math.rsqrt(r2)
        a_cmd = NAV * closing * lam_dot
        v2 = tl.maximum(vx * vx + vy * vy, 1e-6)
        return tl.minimum(tl.maximum(a_cmd / (v2 * C), -1.0), 1.0)

    @triton.jit
    def _swept(d0x, d0y, d1x, d1y):
        # sim.physics.swept_min_dist2
        ex = d1x - d0x
        ey = d1y - d0y
        ee = ex * ex + ey * ey
        s = tl.where(ee < 1e-12, 0.0, -(d0x * ex + d0y * ey) / tl.maximum(ee, 1e-12))
        s = tl.minimum(tl.maximum(s, 0.0), 1.0)
        cx = d0x + s * ex
        cy = d0y + s * ey
        return cx * cx + cy * cy

    @triton.jit
    def _move_side(fpx, fpy, fvx, fvy, rud, thr, alive, ammo, since, req,
                   ma, mpx, mpy, mvx, mvy, mrud, msteps, slot_ok, slot,
                   tpx, tpy, tvx, tvy, live,
                   DT: tl.constexpr, COOLDOWN: tl.constexpr, OFFSET: tl.constexpr, NAV: tl.constexpr,
                   MC: tl.constexpr, MCD0: tl.constexpr, MK: tl.constexpr, MTHRUST: tl.constexpr,
                   FC: tl.constexpr, FCD0: tl.constexpr, FK: tl.constexpr, FTHRUST: tl.constexpr,
                   BURN: tl.constexpr, M: tl.constexpr):
        """One side's steps 1-5 of a physics step (sim.kernels.substep_move): launch, guidance,
        integration. ``t*`` are the enemy fighter's start-of-step position and velocity."""
        # 1. Launch: the lowest free slot, if this fighter may fire.
        free = (ma == 0) & slot_ok
        first = tl.min(tl.where(free, slot, M), axis=1)
        any_free = first < M
        can = (req != 0) & (alive != 0) & (ammo > 0) & (since >= COOLDOWN) & any_free & live
        new = free & (slot == first[:, None]) & can[:, None]
        inv = tl.math.rsqrt(tl.maximum(fvx * fvx + fvy * fvy, 1e-12))
        off = OFFSET * inv
        ma = (ma != 0) | new
        mpx = tl.where(new, (fpx + fvx * off)[:, None], mpx)
        mpy = tl.where(new, (fpy + fvy * off)[:, None], mpy)
        mvx = tl.where(new, fvx[:, None], mvx)
        mvy = tl.where(new, fvy[:, None], mvy)
        msteps = tl.where(new, 0, msteps)
        # 2. Guidance from the start-of-step state.
        guided = _pn(tpx[:, None] - mpx, tpy[:, None] - mpy, tvx[:, None] - mvx, tvy[:, None] - mvy,
                     mvx, mvy, NAV, MC)
        steer = ma & live[:, None]
        mrud = tl.where(steer, guided, mrud)
        # 3. Integration; dt = 0 freezes a dead fighter, idle slots and ended environments.
        dt_f = DT * ((alive != 0) & live).to(tl.float32)
        fpx2, fpy2, fvx2, fvy2 = _aero(fpx, fpy, fvx, fvy, rud, thr * FTHRUST, dt_f, FC, FCD0, FK)
        thrust_m = (msteps < BURN).to(tl.float32) * MTHRUST
        dt_m = DT * steer.to(tl.float32)
        mpx2, mpy2, mvx2, mvy2 = _aero(mpx, mpy, mvx, mvy, mrud, thrust_m, dt_m, MC, MCD0, MK)
        return (fpx2, fpy2, fvx2, fvy2, can, ma, mpx, mpy, mpx2, mpy2, mvx2, mvy2, mrud, msteps, steer)

    @triton.jit
    def _hit_and_clocks(mpx, mpy, mpx2, mpy2, tpx, tpy, tpx2, tpy2, steer, t_alive, msteps,
                        since, ammo, req, can, live, HIT_R2: tl.constexpr):
        """Step 5's hit test (closest approach during the step) and step 4's clocks."""
        dist2 = _swept(mpx - tpx[:, None], mpy - tpy[:, None], mpx2 - tpx2[:, None], mpy2 - tpy2[:, None])
        hit = steer & (t_alive != 0)[:, None] & (dist2 < HIT_R2)
        msteps = msteps + steer.to(tl.int32)
        since = tl.where(can, 0, since) + live.to(tl.int32)
        ammo = ammo - can.to(tl.int32)
        req = (req != 0) & ~can
        return hit, msteps, since, ammo, req

    @triton.jit
    def _decision_kernel(
        f_px, f_py, f_vx, f_vy, f_thr, f_rud, f_alive, f_ammo, f_since, f_req,
        m_active, m_px, m_py, m_vx, m_vy, m_rud, m_steps, physics_steps, decision_steps,
        a_live, a_term, a_trunc, a_done, a_winner, a_reason, a_launches, a_hits, a_reward, a_mhit,
        n,
        SUBSTEPS: tl.constexpr, DT: tl.constexpr, COOLDOWN: tl.constexpr, OFFSET: tl.constexpr,
        NAV: tl.constexpr, MC: tl.constexpr, MCD0: tl.constexpr, MK: tl.constexpr, MTHRUST: tl.constexpr,
        FC: tl.constexpr, FCD0: tl.constexpr, FK: tl.constexpr, FTHRUST: tl.constexpr,
        BURN: tl.constexpr, HIT_R2: tl.constexpr, HALF: tl.constexpr, MIN_SPEED2: tl.constexpr,
        MAX_FLIGHT: tl.constexpr, TIME_LIMIT: tl.constexpr, M: tl.constexpr, MP2: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        env = pid * BLOCK + tl.arange(0, BLOCK)
        ok = env < n
        slot = tl.arange(0, MP2)[None, :]
        slot_ok = slot < M
        ok2 = ok[:, None] & slot_ok
        # [2, M, N] tensors: side s, slot j of environment i at (s * M + j) * n + i.
        m0 = slot * n + env[:, None]
        m1 = (slot + M) * n + env[:, None]

        # Fighters, both sides.
        px0, px1 = _load2(f_px, env, n + env, ok, 0.0)
        py0, py1 = _load2(f_py, env, n + env, ok, 0.0)
        vx0, vx1 = _load2(f_vx, env, n + env, ok, 0.0)
        vy0, vy1 = _load2(f_vy, env, n + env, ok, 0.0)
        thr0, thr1 = _load2(f_thr, env, n + env, ok, 0.0)
        rud0, rud1 = _load2(f_rud, env, n + env, ok, 0.0)
        al0, al1 = _load2(f_alive, env, n + env, ok, 0)
        al0, al1 = al0.to(tl.int1), al1.to(tl.int1)
        am0, am1 = _load2(f_ammo, env, n + env, ok, 0)
        si0, si1 = _load2(f_since, env, n + env, ok, 0)
        rq0, rq1 = _load2(f_req, env, n + env, ok, 0)
        rq0, rq1 = rq0.to(tl.int1), rq1.to(tl.int1)
        # Missiles, each side a [BLOCK, MP2] tile (slots past M masked off).
        ma0, ma1 = _load2(m_active, m0, m1, ok2, 0)
        ma0, ma1 = ma0.to(tl.int1), ma1.to(tl.int1)
        mpx0, mpx1 = _load2(m_px, m0, m1, ok2, 0.0)
        mpy0, mpy1 = _load2(m_py, m0, m1, ok2, 0.0)
        mvx0, mvx1 = _load2(m_vx, m0, m1, ok2, 0.0)
        mvy0, mvy1 = _load2(m_vy, m0, m1, ok2, 0.0)
        mr0, mr1 = _load2(m_rud, m0, m1, ok2, 0.0)
        ms0, ms1 = _load2(m_steps, m0, m1, ok2, 0)
        steps = tl.load(physics_steps + env, mask=ok, other=0)

        # DecisionAccumulators.begin()
        live = ok
        term = tl.zeros([BLOCK], tl.int1)
        winner = tl.full([BLOCK], _NONE, tl.int64)
        reason = tl.zeros([BLOCK], tl.int64)
        la0 = tl.zeros([BLOCK], tl.int64)
        la1 = tl.zeros([BLOCK], tl.int64)
        hi0 = tl.zeros([BLOCK], tl.int64)
        hi1 = tl.zeros([BLOCK], tl.int64)
        hit0 = tl.zeros([BLOCK, MP2], tl.int1)
        hit1 = tl.zeros([BLOCK, MP2], tl.int1)

        for _ in range(SUBSTEPS):
            # Steps 1-3 for each side; the target of side s is fighter 1 - s at the start.
            (px0n, py0n, vx0n, vy0n, can0, ma0, mpx0s, mpy0s, mpx0, mpy0, mvx0, mvy0, mr0, ms0,
             st0) = _move_side(px0, py0, vx0, vy0, rud0, thr0, al0, am0, si0, rq0,
                               ma0, mpx0, mpy0, mvx0, mvy0, mr0, ms0, slot_ok, slot,
                               px1, py1, vx1, vy1, live,
                               DT, COOLDOWN, OFFSET, NAV, MC, MCD0, MK, MTHRUST, FC, FCD0, FK, FTHRUST,
                               BURN, M)
            (px1n, py1n, vx1n, vy1n, can1, ma1, mpx1s, mpy1s, mpx1, mpy1, mvx1, mvy1, mr1, ms1,
             st1) = _move_side(px1, py1, vx1, vy1, rud1, thr1, al1, am1, si1, rq1,
                               ma1, mpx1, mpy1, mvx1, mvy1, mr1, ms1, slot_ok, slot,
                               px0, py0, vx0, vy0, live,
                               DT, COOLDOWN, OFFSET, NAV, MC, MCD0, MK, MTHRUST, FC, FCD0, FK, FTHRUST,
                               BURN, M)
            la0 += can0.to(tl.int64)
            la1 += can1.to(tl.int64)
            # 5. Hits against the target's start and end of step; 4. clocks.
            hit0, ms0, si0, am0, rq0 = _hit_and_clocks(mpx0s, mpy0s, mpx0, mpy0, px1, py1, px1n, py1n, st0,
                                                       al1, ms0, si0, am0, rq0, can0, live, HIT_R2)
            hit1, ms1, si1, am1, rq1 = _hit_and_clocks(mpx1s, mpy1s, mpx1, mpy1, px0, py0, px0n, py0n, st1,
                                                       al0, ms1, si1, am1, rq1, can1, live, HIT_R2)
            steps += live.to(tl.int64)
            px0, py0, vx0, vy0 = px0n, py0n, vx0n, vy0n
            px1, py1, vx1, vy1 = px1n, py1n, vx1n, vy1n

            # sim.kernels.substep_events: hits counted, arena, destruction, missile loss, outcome.
            hi0 += tl.sum(hit0.to(tl.int64), axis=1)
            hi1 += tl.sum(hit1.to(tl.int64), axis=1)
            hf0 = tl.max(hit1.to(tl.int32), axis=1) > 0  # fighter 0 hit by a missile of side 1
            hf1 = tl.max(hit0.to(tl.int32), axis=1) > 0
            out0 = al0 & live & ((tl.abs(px0) > HALF) | (tl.abs(py0) > HALF))
            out1 = al1 & live & ((tl.abs(px1) > HALF) | (tl.abs(py1) > HALF))
            d0 = hf0 | out0
            d1 = hf1 | out1
            al0 = al0 & ~d0
            al1 = al1 & ~d1
            lost0 = (((ms0 >= BURN) & (mvx0 * mvx0 + mvy0 * mvy0 < MIN_SPEED2)) | (ms0 > MAX_FLIGHT)
                     | ~al1[:, None])
            lost1 = (((ms1 >= BURN) & (mvx1 * mvx1 + mvy1 * mvy1 < MIN_SPEED2)) | (ms1 > MAX_FLIGHT)
                     | ~al0[:, None])
            ma0 = ma0 & ~hit0 & ~(lost0 & live[:, None])
            ma1 = ma1 & ~hit1 & ~(lost1 & live[:, None])
            any_d = d0 | d1
            spent = (am0 == 0) & (am1 == 0)
            flying = (tl.max((ma0 & slot_ok).to(tl.int32), axis=1) + tl.max((ma1 & slot_ok).to(tl.int32), axis=1)) > 0
            ammo_out = live & ~any_d & spent & ~flying
            end_now = any_d | ammo_out
            w = tl.where((d0 & d1) | ammo_out, _DRAW, tl.where(d0, _BLUE, _RED))
            r = tl.where(ammo_out, _AMMO,
                         tl.where(out0 | out1, _OUT, tl.where(hf0 & hf1, _MUTUAL, _KILL)))
            winner = tl.where(end_now, w.to(tl.int64), winner)
            reason = tl.where(end_now, r.to(tl.int64), reason)
            term = term | end_now
            live = live & ~end_now

        # sim.kernels.finish_decision
        trunc = live & (steps >= TIME_LIMIT)
        winner = tl.where(trunc, _DRAW, winner)
        reason = tl.where(trunc, _TIME, reason)
        done = term | trunc
        red = (term & (winner == _RED)).to(tl.float32)
        blue = (term & (winner == _BLUE)).to(tl.float32)
        dsteps = tl.load(decision_steps + env, mask=ok, other=0)

        _store2(f_px, env, n + env, px0, px1, ok)
        _store2(f_py, env, n + env, py0, py1, ok)
        _store2(f_vx, env, n + env, vx0, vx1, ok)
        _store2(f_vy, env, n + env, vy0, vy1, ok)
        _store2(f_alive, env, n + env, al0, al1, ok)
        _store2(f_ammo, env, n + env, am0, am1, ok)
        _store2(f_since, env, n + env, si0, si1, ok)
        _store2(f_req, env, n + env, rq0, rq1, ok)
        _store2(m_active, m0, m1, ma0, ma1, ok2)
        _store2(m_px, m0, m1, mpx0, mpx1, ok2)
        _store2(m_py, m0, m1, mpy0, mpy1, ok2)
        _store2(m_vx, m0, m1, mvx0, mvx1, ok2)
        _store2(m_vy, m0, m1, mvy0, mvy1, ok2)
        _store2(m_rud, m0, m1, mr0, mr1, ok2)
        _store2(m_steps, m0, m1, ms0, ms1, ok2)
        _store2(a_mhit, m0, m1, hit0, hit1, ok2)
        tl.store(physics_steps + env, steps, mask=ok)
        tl.store(decision_steps + env, dsteps + 1, mask=ok)
        tl.store(a_live + env, live, mask=ok)
        tl.store(a_term + env, term, mask=ok)
        tl.store(a_trunc + env, trunc, mask=ok)
        tl.store(a_done + env, done, mask=ok)
        tl.store(a_winner + env, winner, mask=ok)
        tl.store(a_reason + env, reason, mask=ok)
        _store2(a_launches, env, n + env, la0, la1, ok)
        _store2(a_hits, env, n + env, hi0, hi1, ok)
        tl.store(a_reward + env, red - blue, mask=ok)
        tl.store(a_reward + n + env, blue - red, mask=ok)


def decision_physics(s: SimState, acc: DecisionAccumulators, cfg: SimConfig, block: int = 128) -> None:
    """One decision's physics and closing, in place: what ``acc.begin()``, then
    ``physics_steps_per_decision`` × :func:`sim.kernels.physics_substep`, then
    :func:`sim.kernels.finish_decision` do, as one kernel launch."""
    if triton is None:
        raise RuntimeError("sim.fused needs Triton")
    n = s.f_px.shape[1]
    m = cfg.missiles_per_fighter
    _decision_kernel[(triton.cdiv(n, block),)](
        s.f_px, s.f_py, s.f_vx, s.f_vy, s.f_throttle, s.f_rudder, s.f_alive, s.f_ammo,
        s.f_since_launch, s.f_fire_req, s.m_active, s.m_px, s.m_py, s.m_vx, s.m_vy, s.m_rudder,
        s.m_steps, s.physics_steps, s.decision_steps,
        acc.live, acc.terminated, acc.truncated, acc.done, acc.winner, acc.end_reason, acc.launches,
        acc.hits, acc.reward, acc.missile_hit,
        n,
        SUBSTEPS=cfg.physics_steps_per_decision, DT=cfg.dt_s, COOLDOWN=cfg.cooldown_steps,
        OFFSET=cfg.launch_offset_m, NAV=cfg.nav_constant,
        MC=cfg.missile.lift_factor, MCD0=cfg.missile.cd0, MK=cfg.missile.induced_drag_factor,
        MTHRUST=cfg.missile.max_thrust_mps2,
        FC=cfg.fighter.lift_factor, FCD0=cfg.fighter.cd0, FK=cfg.fighter.induced_drag_factor,
        FTHRUST=cfg.fighter.max_thrust_mps2,
        BURN=cfg.burn_steps, HIT_R2=cfg.hit_radius_m**2, HALF=cfg.arena_half_width_m,
        MIN_SPEED2=cfg.missile_min_speed_mps**2, MAX_FLIGHT=cfg.max_flight_steps,
        TIME_LIMIT=cfg.time_limit_steps, M=m, MP2=triton.next_power_of_2(m), BLOCK=block,
    )
