"""The scalar reference simulator: one environment, plain Python floats (float64), math only.

This is the oracle the batched simulator is checked against. It follows ``sim.md`` and
``sim/RULES.md`` line by line, favouring the obvious reading over speed: every physics step is
written out in the order RULES.md gives (launch, guidance, integration, clocks, hits, arena,
destruction, missile loss, outcome); the observation is built field by field from the layout
in ``sim/layout.py`` by ``sim/reference/obs.py``; the fighter and missile state live in
``sim/reference/state.py``. There is no auto-reset: the caller resets after ``done``.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any

from sim.config import AeroParams, SimConfig
from sim.layout import ObsLayout
from sim.reference.obs import observe_side
from sim.reference.state import ReferenceFighter, ReferenceMissile
from sim.scenarios import InitialConditions

WINNER_NONE, WINNER_RED, WINNER_BLUE, WINNER_DRAW = -1, 0, 1, 2
"""``winner`` codes (RULES.md "Outcome codes")."""
END_NONE, END_KILL, END_MUTUAL_KILL, END_OUT_OF_ARENA, END_AMMO_OUT, END_TIME_LIMIT = range(6)
"""``end_reason`` codes (RULES.md "Outcome codes")."""

RUDDER_LEVELS = (-1.0, 0.0, 1.0)
"""Discrete rudder index → rudder command."""
THROTTLE_LEVELS = (0.0, 0.5, 1.0)
"""Discrete throttle index → throttle."""

_MIN_SQ = 1e-6  # floor for |r|² and V² in guidance (RULES.md, guidance)
_MIN_SPEED = 1e-6  # floor for |v| when taking the heading (RULES.md, integration)
_SWEEP_EPS = 1e-12  # below this |e|² the relative motion is a point (RULES.md, hits)


@dataclass
class ReferenceStep:
    """What one decision step reports (RULES.md "Outcome codes, rewards, info")."""

    obs: list[list[float]]
    """Observation of side 0 and side 1 (each ``layout.size`` floats); final obs if ended."""
    reward: list[float]
    """Outcome reward per side: +1 win, −1 loss, 0 otherwise (and 0 while running)."""
    terminated: bool
    """A fighter was destroyed or both ran out of ammunition."""
    truncated: bool
    """The time limit was reached without termination."""
    winner: int
    """−1 running, 0 red, 1 blue, 2 draw."""
    end_reason: int
    """0 none, 1 kill, 2 mutual_kill, 3 out_of_arena, 4 ammo_out, 5 time_limit."""
    launches: list[int]
    """Missiles launched by each side during this decision."""
    hits: list[int]
    """Missiles of each side that hit during this decision."""


def _norm(x: float, y: float) -> float:
    return math.sqrt(x * x + y * y)


def _integrate(pos: list[float], vel: list[float], thrust: float, rudder: float,
               aero: AeroParams, dt: float) -> None:
    """Advance one body by one physics step with the exact-turn rule, in place."""
    speed = _norm(vel[0], vel[1])
    inv = 1.0 / max(speed, _MIN_SPEED)
    nx, ny = vel[0] * inv, vel[1] * inv
    c = aero.lift_factor
    omega = speed * c * rudder
    lift = abs(rudder) * c
    a_t = thrust - (aero.cd0 + aero.induced_drag_factor * lift * lift) * speed * speed
    ca, sa = math.cos(omega * dt), math.sin(omega * dt)
    nx, ny = ca * nx - sa * ny, sa * nx + ca * ny
    new_speed = speed + a_t * dt
    vel[0], vel[1] = new_speed * nx, new_speed * ny
    pos[0] += vel[0] * dt
    pos[1] += vel[1] * dt


def _guidance(m: ReferenceMissile, target: ReferenceFighter, nav: float, c: float) -> float:
    """True proportional navigation: the missile's rudder from the current state."""
    rx, ry = target.pos[0] - m.pos[0], target.pos[1] - m.pos[1]
    wx, wy = target.vel[0] - m.vel[0], target.vel[1] - m.vel[1]
    r2 = max(rx * rx + ry * ry, _MIN_SQ)
    los_rate = (rx * wy - ry * wx) / r2
    closing = -(rx * wx + ry * wy) / math.sqrt(r2)
    a_cmd = nav * closing * los_rate
    v2 = max(m.vel[0] ** 2 + m.vel[1] ** 2, _MIN_SQ)
    return min(max(a_cmd / (v2 * c), -1.0), 1.0)


def _closest_approach(d0x: float, d0y: float, d1x: float, d1y: float) -> float:
    """Closest distance of a relative position moving linearly from d0 to d1."""
    ex, ey = d1x - d0x, d1y - d0y
    e2 = ex * ex + ey * ey
    s = 0.0 if e2 < _SWEEP_EPS else min(max(-(d0x * ex + d0y * ey) / e2, 0.0), 1.0)
    return _norm(d0x + s * ex, d0y + s * ey)


class ReferenceSim:
    """One duel, stepped in plain Python; the oracle for the batched simulator.

    State lives in plain attributes (``fighters``, ``missiles``, ``physics_steps``,
    ``decision_steps``, ``done``) that tests may read and, to set up a situation, write.
    """

    def __init__(self, config: SimConfig) -> None:
        """Build an (unstarted) simulator; call :meth:`reset` before :meth:`step`."""
        if not isinstance(config, SimConfig):
            raise ValueError(f"config must be a SimConfig, got {type(config).__name__}")
        if config.obs_history:
            raise ValueError("the reference sim observes the current frame only: obs_history must be 0, "
                             f"got {config.obs_history} (the batched sim stacks past frames)")
        if config.obs_trace_s:
            raise ValueError("the reference sim observes the current frame only: obs_trace_s must be 0, "
                             f"got {config.obs_trace_s} (the batched sim keeps the trace)")
        self.config = config
        self.layout = ObsLayout.from_config(config)
        n = config.missiles_per_fighter
        self.fighters: list[ReferenceFighter] = [
            ReferenceFighter([0.0, 0.0], [0.0, 0.0]) for _ in range(2)
        ]
        self.missiles: list[list[ReferenceMissile]] = [
            [ReferenceMissile() for _ in range(n)] for _ in range(2)
        ]
        self.physics_steps = 0
        self.decision_steps = 0
        self.done = True  # nothing to step until reset
        self._started = False

    # ------------------------------------------------------------------ episode control
    def reset(self, ic: InitialConditions) -> list[list[float]]:
        """Start a new episode from initial conditions; returns both sides' observations."""
        if not isinstance(ic, InitialConditions):
            raise ValueError(f"ic must be an InitialConditions, got {type(ic).__name__}")
        cfg = self.config
        sides = (
            (ic.red_pos, ic.red_heading_rad, ic.red_speed_mps),
            (ic.blue_pos, ic.blue_heading_rad, ic.blue_speed_mps),
        )
        for side, (pos, heading, speed) in enumerate(sides):
            if len(pos) != 2:
                raise ValueError(f"initial position of side {side} must be (x, y), got {pos!r}")
            values = (float(pos[0]), float(pos[1]), float(heading), float(speed))
            if not all(math.isfinite(v) for v in values):
                raise ValueError(f"initial conditions of side {side} must be finite, got {ic!r}")
            ammo = ic.red_ammo if side == 0 else ic.blue_ammo
            if ammo is not None and not 0 <= int(ammo) <= cfg.missiles_per_fighter:
                raise ValueError(f"initial missiles of side {side} must be 0 to {cfg.missiles_per_fighter}, got {ammo!r}")
            self.fighters[side] = ReferenceFighter(
                pos=[values[0], values[1]],
                vel=[values[3] * math.cos(values[2]), values[3] * math.sin(values[2])],
                throttle=1.0,
                rudder=0.0,
                alive=True,
                missiles_left=cfg.missiles_per_fighter if ammo is None else int(ammo),
                since_launch_steps=cfg.cooldown_steps,
                fire_request=False,
            )
            self.missiles[side] = [ReferenceMissile() for _ in range(cfg.missiles_per_fighter)]
        self.physics_steps = 0
        self.decision_steps = 0
        self.done = False
        self._started = True
        return self.observe()

    def _decode(self, actions: Any) -> list[tuple[float, float, bool]]:
        """Validate and decode ``actions[side] = (rudder, throttle, fire)``."""
        if not hasattr(actions, "__len__"):
            raise ValueError(f"actions must be a sequence of 2 per-side actions, got {actions!r}")
        if len(actions) != 2:
            raise ValueError(f"actions must hold 2 per-side actions, got {len(actions)}")
        out = []
        for side in range(2):
            act = actions[side]
            if not hasattr(act, "__len__") or len(act) != 3:
                raise ValueError(
                    f"actions[{side}] must be (rudder, throttle, fire), got {act!r}"
                )
            if self.config.action_mode == "discrete":
                try:
                    idx = [operator.index(a) for a in act]
                except TypeError:
                    raise ValueError(
                        f"discrete actions[{side}] must be integer indices, got {act!r}"
                    ) from None
                for name, i, hi in zip(("rudder", "throttle", "fire"), idx, (3, 3, 2), strict=True):
                    if not 0 <= i < hi:
                        raise ValueError(
                            f"actions[{side}] {name} index must be in 0..{hi - 1}, got {i}"
                        )
                out.append((RUDDER_LEVELS[idx[0]], THROTTLE_LEVELS[idx[1]], idx[2] == 1))
            else:
                try:
                    vals = [float(a) for a in act]
                except (TypeError, ValueError):
                    raise ValueError(f"continuous actions[{side}] must be numbers, got {act!r}") from None
                if any(math.isnan(v) for v in vals):
                    raise ValueError(f"actions[{side}] contains NaN: {vals!r}")
                out.append((min(max(vals[0], -1.0), 1.0), min(max(vals[1], 0.0), 1.0), vals[2] > 0.5))
        return out

    def step(self, actions: Any) -> ReferenceStep:
        """Run one decision step (``physics_steps_per_decision`` physics steps)."""
        if not self._started:
            raise RuntimeError("ReferenceSim.step called before reset")
        if self.done:
            raise RuntimeError("ReferenceSim.step called after the episode ended; call reset first")
        decoded = self._decode(actions)
        for fighter, (rudder, throttle, fire) in zip(self.fighters, decoded, strict=True):
            fighter.rudder, fighter.throttle, fighter.fire_request = rudder, throttle, fire
        launches, hits = [0, 0], [0, 0]
        winner, end_reason, terminated = WINNER_NONE, END_NONE, False
        for _ in range(self.config.physics_steps_per_decision):
            winner, end_reason = self._physics_step(launches, hits)
            if winner != WINNER_NONE:
                terminated = True
                break  # frozen for the rest of the decision
        self.decision_steps += 1
        truncated = not terminated and self.physics_steps >= self.config.time_limit_steps
        if truncated:
            winner, end_reason = WINNER_DRAW, END_TIME_LIMIT
        reward = [0.0, 0.0]
        if terminated and winner in (WINNER_RED, WINNER_BLUE):
            reward[winner], reward[1 - winner] = 1.0, -1.0
        self.done = terminated or truncated
        return ReferenceStep(self.observe(), reward, terminated, truncated, winner, end_reason,
                             launches, hits)

    # ------------------------------------------------------------------ one physics step
    def _physics_step(self, launches: list[int], hits: list[int]) -> tuple[int, int]:
        """One physics step in RULES.md order; returns ``(winner, end_reason)``."""
        cfg = self.config
        dt = cfg.dt_s
        f = self.fighters
        # 1. Launch, side 0 then side 1.
        for side in range(2):
            ftr = f[side]
            if not (ftr.fire_request and ftr.alive and ftr.missiles_left > 0
                    and ftr.since_launch_steps >= cfg.cooldown_steps):
                continue
            slot = next((m for m in self.missiles[side] if not m.active), None)
            if slot is None:
                continue
            inv = 1.0 / max(_norm(ftr.vel[0], ftr.vel[1]), _MIN_SPEED)
            slot.active = True
            slot.pos = [ftr.pos[0] + cfg.launch_offset_m * ftr.vel[0] * inv,
                        ftr.pos[1] + cfg.launch_offset_m * ftr.vel[1] * inv]
            slot.vel = [ftr.vel[0], ftr.vel[1]]
            slot.rudder = 0.0
            slot.flight_steps = 0
            ftr.missiles_left -= 1
            ftr.since_launch_steps = 0
            ftr.fire_request = False
            launches[side] += 1
        # Start-of-step positions for the swept hit test (after launch: a new missile starts
        # at its launch point).
        alive0 = [ftr.alive for ftr in f]
        f_start = [(ftr.pos[0], ftr.pos[1]) for ftr in f]
        m_start = [[(m.pos[0], m.pos[1]) for m in self.missiles[s]] for s in range(2)]
        # 2. Guidance, all from the start-of-step state before anything moves.
        for side in range(2):
            for m in self.missiles[side]:
                if m.active:
                    m.rudder = _guidance(m, f[1 - side], cfg.nav_constant, cfg.missile.lift_factor)
        # 3. Integration.
        for ftr in f:
            if ftr.alive:
                _integrate(ftr.pos, ftr.vel, ftr.throttle * cfg.fighter.max_thrust_mps2,
                           ftr.rudder, cfg.fighter, dt)
        for side in range(2):
            for m in self.missiles[side]:
                if m.active:
                    thrust = cfg.missile.max_thrust_mps2 if m.flight_steps < cfg.burn_steps else 0.0
                    _integrate(m.pos, m.vel, thrust, m.rudder, cfg.missile, dt)
        # 4. Clocks.
        for side in range(2):
            for m in self.missiles[side]:
                if m.active:
                    m.flight_steps += 1
        for ftr in f:
            ftr.since_launch_steps += 1
        self.physics_steps += 1
        # 5. Hits (swept closest approach).
        was_hit = [False, False]
        for side in range(2):
            target = 1 - side
            if not alive0[target]:
                continue
            t0, t1 = f_start[target], f[target].pos
            for m, (m0x, m0y) in zip(self.missiles[side], m_start[side], strict=True):
                if not m.active:
                    continue
                dist = _closest_approach(t0[0] - m0x, t0[1] - m0y,
                                         t1[0] - m.pos[0], t1[1] - m.pos[1])
                if dist < cfg.hit_radius_m:
                    m.active = False
                    was_hit[target] = True
                    hits[side] += 1
        # 6. Arena.
        half = cfg.arena_half_width_m
        was_out = [ftr.alive and (abs(ftr.pos[0]) > half or abs(ftr.pos[1]) > half) for ftr in f]
        # 7. Destruction.
        destroyed = [False, False]
        for side in range(2):
            if f[side].alive and (was_hit[side] or was_out[side]):
                f[side].alive = False
                destroyed[side] = True
        # 8. Missile loss.
        for side in range(2):
            for m in self.missiles[side]:
                if not m.active:
                    continue
                slow = (m.flight_steps >= cfg.burn_steps
                        and _norm(m.vel[0], m.vel[1]) < cfg.missile_min_speed_mps)
                if slow or m.flight_steps > cfg.max_flight_steps or not f[1 - side].alive:
                    m.active = False
        # 9. Outcome.
        if destroyed[0] or destroyed[1]:
            if destroyed[0] and destroyed[1]:
                winner = WINNER_DRAW
            else:
                winner = WINNER_BLUE if destroyed[0] else WINNER_RED
            if (destroyed[0] and was_out[0]) or (destroyed[1] and was_out[1]):
                reason = END_OUT_OF_ARENA
            elif was_hit[0] and was_hit[1]:
                reason = END_MUTUAL_KILL
            else:
                reason = END_KILL
            return winner, reason
        no_ammo = f[0].missiles_left == 0 and f[1].missiles_left == 0
        if no_ammo and not any(m.active for side in self.missiles for m in side):
            return WINNER_DRAW, END_AMMO_OUT
        return WINNER_NONE, END_NONE

    # ------------------------------------------------------------------ observations
    def observe(self) -> list[list[float]]:
        """Both sides' observations of the current state (``layout.size`` floats each)."""
        if not self._started:
            raise RuntimeError("ReferenceSim.observe called before reset")
        f, m, steps = self.fighters, self.missiles, self.physics_steps
        return [
            observe_side(self.config, f[0], f[1], m[0], m[1], steps),
            observe_side(self.config, f[1], f[0], m[1], m[0], steps),
        ]
