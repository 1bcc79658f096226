"""The simulator's step functions over a :class:`SimState`, free of Python branching on data.

``physics_substep`` is one physics step of sim/RULES.md for every environment; ``finish_decision``
closes a decision step (truncation, outcome, rewards). Both mutate their tensors in place and
contain no host sync, so they run eagerly, under ``torch.compile``, or inside a CUDA graph with
the same results.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sim.config import SimConfig
from sim.physics import aero_step, pn_rudder, swept_min_dist2
from sim.state import SimState

WINNER_NONE, WINNER_RED, WINNER_BLUE, WINNER_DRAW = -1, 0, 1, 2
END_NONE, END_KILL, END_MUTUAL_KILL, END_OUT_OF_ARENA, END_AMMO_OUT, END_TIME_LIMIT = range(6)
END_REASONS = ("none", "kill", "mutual_kill", "out_of_arena", "ammo_out", "time_limit")
WINNERS = {WINNER_NONE: "running", WINNER_RED: "red", WINNER_BLUE: "blue", WINNER_DRAW: "draw"}


@dataclass
class DecisionAccumulators:
    """Per-decision outcome buffers, reset at the start of every decision step."""

    live: torch.Tensor  # [N] bool: the episode has not ended in this decision
    terminated: torch.Tensor  # [N] bool
    truncated: torch.Tensor  # [N] bool
    done: torch.Tensor  # [N] bool
    winner: torch.Tensor  # [N] int64
    end_reason: torch.Tensor  # [N] int64
    launches: torch.Tensor  # [2, N] int64
    hits: torch.Tensor  # [2, N] int64
    reward: torch.Tensor  # [2, N] float
    missile_hit: torch.Tensor  # [2, M, N] bool scratch: which missiles hit in this physics step

    @classmethod
    def allocate(cls, n: int, m: int, dtype: torch.dtype, device: torch.device) -> DecisionAccumulators:
        b = torch.zeros(n, dtype=torch.bool, device=device)
        i = torch.zeros(n, dtype=torch.int64, device=device)
        return cls(
            live=b.clone(), terminated=b.clone(), truncated=b.clone(), done=b.clone(),
            winner=i.clone(), end_reason=i.clone(),
            launches=torch.zeros(2, n, dtype=torch.int64, device=device),
            hits=torch.zeros(2, n, dtype=torch.int64, device=device),
            reward=torch.zeros(2, n, dtype=dtype, device=device),
            missile_hit=torch.zeros(2, m, n, dtype=torch.bool, device=device),
        )

    def begin(self) -> None:
        self.live.fill_(True)
        self.terminated.zero_()
        self.truncated.zero_()
        self.winner.fill_(WINNER_NONE)
        self.end_reason.zero_()
        self.launches.zero_()
        self.hits.zero_()


def physics_substep(s: SimState, acc: DecisionAccumulators, cfg: SimConfig) -> None:
    """One physics step for every environment still live in this decision (RULES.md order)."""
    substep_move(s, acc, cfg)
    substep_events(s, acc, cfg)


def substep_move(s: SimState, acc: DecisionAccumulators, cfg: SimConfig) -> None:
    """Steps 1-5 of a physics step: launch, guidance, integration, clocks and the swept hit test
    (its per-missile result goes to ``acc.missile_hit``).

    Shapes: fighters ``[2, N]``, missiles ``[2, M, N]``; ``flip(0)`` swaps the sides, so
    ``x.flip(0)[s]`` is side ``s``'s opponent. Split from :func:`substep_events` so that the
    compiled form materializes the integration once instead of recomputing it inside the
    reductions that follow.
    """
    live = acc.live  # [N]
    live_f = live.unsqueeze(0)  # [1, N]
    dtype = s.f_px.dtype

    # 1. Launch: lowest free slot of each side whose fighter may fire.
    free = ~s.m_active
    first_free = free & (free.to(torch.int32).cumsum(1) == 1)
    can = (
        s.f_fire_req & s.f_alive & (s.f_ammo > 0)
        & (s.f_since_launch >= cfg.cooldown_steps) & free.any(1) & live_f
    )
    new = first_free & can.unsqueeze(1)
    inv = torch.rsqrt(torch.clamp(s.f_vx * s.f_vx + s.f_vy * s.f_vy, min=1e-12))
    off = cfg.launch_offset_m * inv
    m_active = s.m_active | new
    m_px = torch.where(new, (s.f_px + s.f_vx * off).unsqueeze(1), s.m_px)
    m_py = torch.where(new, (s.f_py + s.f_vy * off).unsqueeze(1), s.m_py)
    m_vx = torch.where(new, s.f_vx.unsqueeze(1), s.m_vx)
    m_vy = torch.where(new, s.f_vy.unsqueeze(1), s.m_vy)
    m_steps = torch.where(new, 0, s.m_steps)
    acc.launches.add_(can.long())

    # 2. Guidance from the start-of-step state; the target of side s is fighter 1 - s.
    tpx, tpy = s.f_px.flip(0).unsqueeze(1), s.f_py.flip(0).unsqueeze(1)
    tvx, tvy = s.f_vx.flip(0).unsqueeze(1), s.f_vy.flip(0).unsqueeze(1)
    guided = pn_rudder(tpx - m_px, tpy - m_py, tvx - m_vx, tvy - m_vy, m_vx, m_vy,
                       cfg.nav_constant, cfg.missile)
    steer = m_active & live_f.unsqueeze(1)
    m_rudder = torch.where(steer, guided, s.m_rudder)

    # 3. Integration; dt = 0 freezes dead fighters, idle slots and ended environments.
    dt_f = cfg.dt_s * (s.f_alive & live_f).to(dtype)
    f_px, f_py, f_vx, f_vy = aero_step(
        s.f_px, s.f_py, s.f_vx, s.f_vy, s.f_rudder, s.f_throttle * cfg.fighter.max_thrust_mps2,
        cfg.fighter, dt_f,
    )
    thrust_m = (m_steps < cfg.burn_steps).to(dtype) * cfg.missile.max_thrust_mps2
    dt_m = cfg.dt_s * steer.to(dtype)
    m_px2, m_py2, m_vx2, m_vy2 = aero_step(m_px, m_py, m_vx, m_vy, m_rudder, thrust_m, cfg.missile, dt_m)

    # 5. Hits: closest approach during the step, relative motion linear.
    tpx2, tpy2 = f_px.flip(0).unsqueeze(1), f_py.flip(0).unsqueeze(1)
    dist2 = swept_min_dist2(m_px - tpx, m_py - tpy, m_px2 - tpx2, m_py2 - tpy2)
    acc.missile_hit.copy_(steer & s.f_alive.flip(0).unsqueeze(1) & (dist2 < cfg.hit_radius_m**2))

    # 4. Clocks, and the write-back of everything moved.
    s.m_steps.copy_(m_steps + steer.to(torch.int32))
    s.f_since_launch.copy_(torch.where(can, 0, s.f_since_launch) + live_f.to(torch.int32))
    s.physics_steps.add_(live.long())
    s.f_ammo.sub_(can.to(torch.int32))
    s.f_fire_req.logical_and_(~can)
    s.m_active.copy_(m_active)
    s.m_rudder.copy_(m_rudder)
    s.f_px.copy_(f_px)
    s.f_py.copy_(f_py)
    s.f_vx.copy_(f_vx)
    s.f_vy.copy_(f_vy)
    s.m_px.copy_(m_px2)
    s.m_py.copy_(m_py2)
    s.m_vx.copy_(m_vx2)
    s.m_vy.copy_(m_vy2)


def substep_events(s: SimState, acc: DecisionAccumulators, cfg: SimConfig) -> None:
    """Steps 5-9 of a physics step after :func:`substep_move`: hits counted, arena, destruction,
    missile loss and the outcome."""
    live = acc.live
    live_f = live.unsqueeze(0)
    hit = acc.missile_hit
    acc.hits.add_(hit.long().sum(1))
    hit_f = hit.any(1).flip(0)  # fighter s was hit by a missile of side 1 - s

    # 6-7. Arena and destruction.
    half = cfg.arena_half_width_m
    out = s.f_alive & live_f & ((s.f_px.abs() > half) | (s.f_py.abs() > half))
    destroyed = hit_f | out
    alive = s.f_alive & ~destroyed

    # 8. Missile loss.
    m_speed2 = s.m_vx * s.m_vx + s.m_vy * s.m_vy
    lost = (
        ((s.m_steps >= cfg.burn_steps) & (m_speed2 < cfg.missile_min_speed_mps**2))
        | (s.m_steps > cfg.max_flight_steps)
        | ~alive.flip(0).unsqueeze(1)
    )
    m_active = s.m_active & ~hit & ~(lost & live_f.unsqueeze(1))

    # 9. Outcome.
    any_destroyed = destroyed[0] | destroyed[1]
    all_ammo_spent = (s.f_ammo[0] == 0) & (s.f_ammo[1] == 0)
    ammo_out = live & ~any_destroyed & all_ammo_spent & ~m_active.any(1).any(0)
    end_now = any_destroyed | ammo_out
    winner = torch.where(
        (destroyed[0] & destroyed[1]) | ammo_out,
        WINNER_DRAW,
        torch.where(destroyed[0], WINNER_BLUE, WINNER_RED),
    )
    reason = torch.where(
        ammo_out,
        END_AMMO_OUT,
        torch.where(
            out[0] | out[1],
            END_OUT_OF_ARENA,
            torch.where(hit_f[0] & hit_f[1], END_MUTUAL_KILL, END_KILL),
        ),
    )
    acc.winner.copy_(torch.where(end_now, winner, acc.winner))
    acc.end_reason.copy_(torch.where(end_now, reason, acc.end_reason))
    acc.terminated.logical_or_(end_now)
    acc.live.logical_and_(~end_now)
    s.f_alive.copy_(alive)
    s.m_active.copy_(m_active)


def finish_decision(s: SimState, acc: DecisionAccumulators, cfg: SimConfig) -> None:
    """Truncation at the time limit, done flags and the outcome rewards of a decision step."""
    trunc = acc.live & (s.physics_steps >= cfg.time_limit_steps)
    acc.truncated.copy_(trunc)
    acc.winner.copy_(torch.where(trunc, WINNER_DRAW, acc.winner))
    acc.end_reason.copy_(torch.where(trunc, END_TIME_LIMIT, acc.end_reason))
    torch.logical_or(acc.terminated, trunc, out=acc.done)
    s.decision_steps.add_(1)
    red = (acc.terminated & (acc.winner == WINNER_RED)).to(acc.reward.dtype)
    blue = (acc.terminated & (acc.winner == WINNER_BLUE)).to(acc.reward.dtype)
    acc.reward[0].copy_(red - blue)
    acc.reward[1].copy_(blue - red)

