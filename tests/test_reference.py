"""The scalar reference simulator against the physics and rules of sim.md / sim/RULES.md."""

from __future__ import annotations

import math

import pytest

from sim.config import G, SimConfig
from sim.layout import OBS_CLIP, ObsLayout
from sim.reference.scalar import (
    END_AMMO_OUT,
    END_KILL,
    END_MUTUAL_KILL,
    END_NONE,
    END_OUT_OF_ARENA,
    END_TIME_LIMIT,
    WINNER_BLUE,
    WINNER_DRAW,
    WINNER_NONE,
    WINNER_RED,
    ReferenceSim,
)
from sim.scenarios import InitialConditions, initial_conditions

STRAIGHT_FULL = (1, 2, 0)  # rudder 0, throttle 1, no fire
STRAIGHT_FIRE = (1, 2, 1)
LEFT_FULL = (2, 2, 0)  # full left rudder, throttle 1
FAR = 1e9  # an arena and time limit that never interfere


def speed(body) -> float:
    return math.hypot(*body.vel)


def ic(red_pos, red_heading, red_speed, blue_pos, blue_heading, blue_speed) -> InitialConditions:
    return InitialConditions(tuple(red_pos), red_heading, red_speed, tuple(blue_pos), blue_heading,
                             blue_speed)


def run_until_done(sim: ReferenceSim, actions, max_decisions: int = 700):
    for _ in range(max_decisions):
        out = sim.step(actions)
        if out.terminated or out.truncated:
            return out
    raise AssertionError("episode did not end")


# ---------------------------------------------------------------- physics (sim.md)
def test_fighter_straight_full_throttle_settles_at_489_9():
    sim = ReferenceSim(SimConfig(arena_half_width_m=FAR, max_time_s=FAR))
    sim.reset(ic((0, 0), 0.0, 300.0, (0, 1e6), 0.0, 300.0))
    for _ in range(600):  # 300 s, about 18 relaxation times
        sim.step([STRAIGHT_FULL, STRAIGHT_FULL])
    analytic = math.sqrt(1.5 * G / SimConfig().fighter.cd0)
    assert analytic == pytest.approx(489.9, abs=0.05)
    assert speed(sim.fighters[0]) == pytest.approx(analytic, abs=0.01)
    assert sim.fighters[0].pos[1] == pytest.approx(0.0, abs=1e-6)  # straight stays straight


@pytest.mark.parametrize(("dt_s", "substeps"), [(0.1, 5), (1 / 60, 30)])
def test_fighter_full_rudder_settles_at_255_9_at_any_dt(dt_s, substeps):
    cfg = SimConfig(arena_half_width_m=FAR, max_time_s=FAR, dt_s=dt_s, substeps=substeps)
    sim = ReferenceSim(cfg)
    sim.reset(ic((0, 0), 0.0, 300.0, (0, 1e6), 0.0, 300.0))
    path = []
    for _ in range(240):  # 120 s, about 14 relaxation times of the turning fighter
        sim.step([LEFT_FULL, STRAIGHT_FULL])
        path.append(tuple(sim.fighters[0].pos))
    aero = cfg.fighter
    analytic = math.sqrt(1.5 * G / (aero.cd0 + aero.induced_drag_factor * aero.lift_factor**2))
    assert analytic == pytest.approx(255.9, abs=0.05)
    assert speed(sim.fighters[0]) == pytest.approx(analytic, abs=0.02)
    # Full rudder turns on the Rmin circle: the exact-turn rule walks a regular polygon whose
    # circumradius is Rmin up to (ω·dt)²/24 (below 3e-5 here).
    a, b, c = path[-3:]
    area2 = abs((b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]))
    radius = math.dist(a, b) * math.dist(b, c) * math.dist(c, a) / (2 * area2)
    assert radius == pytest.approx(aero.min_turn_radius_m, abs=0.05)


@pytest.mark.parametrize(("dt_s", "substeps", "peak_tol"), [(0.1, 5, 3.0), (1 / 60, 30, 0.5)])
def test_missile_launched_straight_peaks_at_burnout_and_flies_18_km(dt_s, substeps, peak_tol):
    cfg = SimConfig(arena_half_width_m=FAR, max_time_s=FAR, dt_s=dt_s, substeps=substeps)
    sim = ReferenceSim(cfg)
    # The target is far straight ahead, flying away along the same line: PN commands nothing.
    sim.reset(ic((0, 0), 0.0, 300.0, (1e6, 0), 0.0, 300.0))
    out = sim.step([STRAIGHT_FIRE, STRAIGHT_FULL])
    assert out.launches == [1, 0]
    m = sim.missiles[0][0]
    assert m.active
    peak, speed_at_burnout = 0.0, None
    while m.flight_steps < round(20.0 / dt_s):
        sim.step([STRAIGHT_FULL, STRAIGHT_FULL])
        peak = max(peak, speed(m))
        if m.flight_steps == cfg.burn_steps:
            speed_at_burnout = speed(m)
    assert m.active and m.flight_steps == round(20.0 / dt_s)
    assert speed_at_burnout == peak  # the peak is at burn-out
    # Continuous solution of dV/dt = T − Cd0·V² from 300 m/s over 10 s.
    k = math.sqrt(cfg.missile.max_thrust_mps2 * cfg.missile.cd0)
    v_eq = math.sqrt(cfg.missile.max_thrust_mps2 / cfg.missile.cd0)
    analytic = v_eq * math.tanh(math.atanh(300.0 / v_eq) + k * 10.0)
    assert 1264.0 < peak < 1272.5
    assert peak == pytest.approx(analytic, abs=peak_tol)
    flown = m.pos[0] - cfg.launch_offset_m  # launched 20 m ahead of a fighter at the origin
    assert 18_000.0 <= flown <= 18_100.0
    assert m.pos[1] == 0.0 and m.rudder == 0.0


# ---------------------------------------------------------------- events and episodes
def test_head_on_kill_reports_winner_and_end_reason():
    cfg = SimConfig(scenario="head_on")
    sim = ReferenceSim(cfg)
    sim.reset(initial_conditions(cfg, 0, 0, 0))
    first = sim.step([STRAIGHT_FIRE, STRAIGHT_FULL])
    assert first.launches == [1, 0] and first.winner == WINNER_NONE and first.end_reason == END_NONE
    assert sim.fighters[0].missiles_left == cfg.missiles_per_fighter - 1
    out = run_until_done(sim, [STRAIGHT_FULL, STRAIGHT_FULL])
    assert out.terminated and not out.truncated
    assert (out.winner, out.end_reason) == (WINNER_RED, END_KILL)
    assert out.reward == [1.0, -1.0] and out.hits == [1, 0]
    assert sim.fighters[0].alive and not sim.fighters[1].alive
    assert not sim.missiles[0][0].active and sim.done
    with pytest.raises(RuntimeError, match="after the episode ended"):
        sim.step([STRAIGHT_FULL, STRAIGHT_FULL])


def test_simultaneous_hits_are_a_mutual_kill_draw():
    cfg = SimConfig(scenario="head_on")
    sim = ReferenceSim(cfg)
    sim.reset(initial_conditions(cfg, 0, 0, 0))
    sim.step([STRAIGHT_FIRE, STRAIGHT_FIRE])
    out = run_until_done(sim, [STRAIGHT_FULL, STRAIGHT_FULL])
    assert out.terminated and (out.winner, out.end_reason) == (WINNER_DRAW, END_MUTUAL_KILL)
    assert out.reward == [0.0, 0.0] and out.hits == [1, 1]
    assert not sim.fighters[0].alive and not sim.fighters[1].alive


def test_ammo_out_is_a_draw_once_the_last_missile_is_lost():
    cfg = SimConfig(missiles_per_fighter=1, obs_incoming_missiles=1, obs_own_missiles=1,
                    missile_max_flight_time_s=5.0)
    sim = ReferenceSim(cfg)
    # Flying apart: each missile leaves straight away from its target and times out.
    sim.reset(ic((-14_000, 0), math.pi, 300.0, (14_000, 0), 0.0, 300.0))
    first = sim.step([STRAIGHT_FIRE, STRAIGHT_FIRE])
    assert first.launches == [1, 1] and not first.terminated
    out = run_until_done(sim, [STRAIGHT_FIRE, STRAIGHT_FIRE])
    assert out.terminated and (out.winner, out.end_reason) == (WINNER_DRAW, END_AMMO_OUT)
    assert out.reward == [0.0, 0.0]
    assert sim.physics_steps == cfg.max_flight_steps + 1  # lost when flight steps exceed the max
    assert all(f.alive and f.missiles_left == 0 for f in sim.fighters)


@pytest.mark.parametrize(("max_time_s", "expected_physics_steps"), [(10.0, 100), (10.2, 105)])
def test_time_limit_truncates_without_terminating(max_time_s, expected_physics_steps):
    cfg = SimConfig(scenario="head_on", max_time_s=max_time_s)
    sim = ReferenceSim(cfg)
    sim.reset(initial_conditions(cfg, 0, 0, 0))
    for _ in range(expected_physics_steps // cfg.substeps - 1):
        out = sim.step([STRAIGHT_FULL, STRAIGHT_FULL])
        assert not (out.terminated or out.truncated) and out.winner == WINNER_NONE
    out = sim.step([STRAIGHT_FULL, STRAIGHT_FULL])
    assert out.truncated and not out.terminated
    assert (out.winner, out.end_reason) == (WINNER_DRAW, END_TIME_LIMIT)
    assert out.reward == [0.0, 0.0] and sim.physics_steps == expected_physics_steps
    layout = ObsLayout.from_config(cfg)
    assert out.obs[0][layout.index("time.time_left")] == 0.0


def test_leaving_the_arena_destroys_and_freezes_the_episode():
    sim = ReferenceSim(SimConfig())
    sim.reset(ic((74_990, 0), 0.0, 300.0, (0, 0), 0.0, 300.0))
    blue_before = list(sim.fighters[1].pos)
    out = sim.step([STRAIGHT_FULL, STRAIGHT_FULL])
    assert out.terminated and (out.winner, out.end_reason) == (WINNER_BLUE, END_OUT_OF_ARENA)
    assert out.reward == [-1.0, 1.0]
    assert not sim.fighters[0].alive and sim.fighters[1].alive
    assert sim.physics_steps == 1  # the rest of the decision is frozen
    assert sim.fighters[1].pos[0] == pytest.approx(blue_before[0] + 30.0, abs=0.1)


def _place_missile(sim: ReferenceSim, side: int, pos, vel) -> None:
    m = sim.missiles[side][0]
    m.active, m.pos, m.vel, m.rudder, m.flight_steps = True, list(pos), list(vel), 0.0, 0


def test_swept_hit_catches_a_missile_that_tunnels_through_in_one_step():
    # dt 0.5 s: a 1300 m/s missile and a 300 m/s target close 800 m in one step.
    sim = ReferenceSim(SimConfig(dt_s=0.5, substeps=1))
    sim.reset(ic((-50_000, 0), 0.0, 300.0, (0, 0), math.pi, 300.0))
    _place_missile(sim, 0, (-400.0, 0.0), (1300.0, 0.0))
    out = sim.step([STRAIGHT_FULL, STRAIGHT_FULL])
    m, blue = sim.missiles[0][0], sim.fighters[1]
    end_gap = math.hypot(m.pos[0] - blue.pos[0], m.pos[1] - blue.pos[1])
    assert end_gap > 300.0  # a step-end test alone would have missed
    assert out.hits == [1, 0] and (out.winner, out.end_reason) == (WINNER_RED, END_KILL)
    assert not m.active and not blue.alive


def test_swept_hit_does_not_extend_beyond_the_step():
    # The same geometry with the missile flying away: the closest approach is the start gap.
    sim = ReferenceSim(SimConfig(dt_s=0.5, substeps=1))
    sim.reset(ic((-50_000, 0), 0.0, 300.0, (0, 0), 0.0, 300.0))
    _place_missile(sim, 0, (-400.0, 0.0), (-1300.0, 0.0))
    out = sim.step([STRAIGHT_FULL, STRAIGHT_FULL])
    assert out.hits == [0, 0] and not out.terminated and sim.missiles[0][0].active


def test_kill_mid_decision_is_reported_and_the_rest_is_frozen():
    cfg = SimConfig(substeps=10)
    sim = ReferenceSim(cfg)
    sim.reset(ic((-50_000, 0), 0.0, 300.0, (0, 0), math.pi, 300.0))
    # Closing about 1300 m/s: 130 m per step, so 420 m is covered in the third step.
    _place_missile(sim, 0, (-420.0, 0.0), (1000.0, 0.0))
    out = sim.step([STRAIGHT_FULL, STRAIGHT_FULL])
    assert sim.physics_steps == 3 and out.hits == [1, 0]
    assert out.terminated and out.winner == WINNER_RED
    layout = ObsLayout.from_config(cfg)
    assert out.obs[0][layout.index("time.time_left")] == pytest.approx(1 - 0.3 / cfg.max_time_s)
    assert out.obs[1][layout.index("own.alive")] == 0.0


# ---------------------------------------------------------------- launches and actions
def test_one_fire_command_launches_at_most_one_missile_and_respects_cooldown():
    cfg = SimConfig(fire_cooldown_s=0.1)  # 1 step: ready again within the same decision
    sim = ReferenceSim(cfg)
    sim.reset(initial_conditions(cfg, 7, 0, 0))
    assert sim.step([STRAIGHT_FIRE, STRAIGHT_FULL]).launches == [1, 0]
    assert sum(m.active for m in sim.missiles[0]) == 1
    slow = SimConfig(fire_cooldown_s=1.0)  # 10 steps: every other decision can launch
    sim = ReferenceSim(slow)
    sim.reset(initial_conditions(slow, 7, 0, 0))
    launches = [sim.step([STRAIGHT_FIRE, STRAIGHT_FULL]).launches[0] for _ in range(4)]
    assert launches == [1, 0, 1, 0]
    m = sim.missiles[0][0]
    assert m.flight_steps == 20  # launched at the first physics step, flown 4 decisions


def test_launch_geometry_and_lowest_free_slot():
    sim = ReferenceSim(SimConfig())
    sim.reset(ic((100.0, 200.0), math.pi / 2, 300.0, (100.0, 40_000), math.pi / 2, 300.0))
    sim.missiles[0][0].active = True  # slot 0 busy: the launch takes slot 1
    sim.missiles[0][0].pos = [0.0, -30_000.0]
    sim.missiles[0][0].vel = [0.0, 1.0]
    sim.step([STRAIGHT_FIRE, STRAIGHT_FULL])
    m = sim.missiles[0][1]
    assert m.active and m.flight_steps == 5
    assert m.pos[0] == pytest.approx(100.0, abs=1e-6)
    assert m.pos[1] > 200.0 + 20.0 + 5 * 0.1 * 300.0  # offset, then faster than the carrier


@pytest.mark.parametrize(
    ("mode", "actions", "message"),
    [
        ("discrete", [(1, 3, 0), (1, 1, 0)], "throttle index must be in 0..2"),
        ("discrete", [(1, 1, 2), (1, 1, 0)], "fire index must be in 0..1"),
        ("discrete", [(-1, 1, 0), (1, 1, 0)], "rudder index"),
        ("discrete", [(1.0, 1, 0), (1, 1, 0)], "integer indices"),
        ("discrete", [(1, 1), (1, 1, 0)], r"actions\[0\] must be"),
        ("discrete", [(1, 1, 0)], "2 per-side actions"),
        ("continuous", [(0.0, float("nan"), 0.0), (0.0, 1.0, 0.0)], "NaN"),
    ],
)
def test_bad_actions_raise_specific_errors(mode, actions, message):
    sim = ReferenceSim(SimConfig(action_mode=mode))
    sim.reset(initial_conditions(sim.config, 0, 0, 0))
    with pytest.raises(ValueError, match=message):
        sim.step(actions)


def test_continuous_actions_are_clipped():
    sim = ReferenceSim(SimConfig(action_mode="continuous"))
    sim.reset(initial_conditions(sim.config, 0, 0, 0))
    out = sim.step([(5.0, -3.0, 0.7), (-0.25, 0.4, 0.5)])
    red, blue = sim.fighters
    assert (red.rudder, red.throttle, blue.rudder, blue.throttle) == (1.0, 0.0, -0.25, 0.4)
    assert out.launches == [1, 0]  # fire only when > 0.5


def test_step_before_reset_and_bad_initial_conditions_raise():
    sim = ReferenceSim(SimConfig())
    with pytest.raises(RuntimeError, match="before reset"):
        sim.step([STRAIGHT_FULL, STRAIGHT_FULL])
    with pytest.raises(ValueError, match="side 1 must be finite"):
        sim.reset(ic((0, 0), 0.0, 300.0, (float("nan"), 0), 0.0, 300.0))
    with pytest.raises(ValueError, match=r"side 0 must be \(x, y\)"):
        sim.reset(InitialConditions((0.0,), 0.0, 300.0, (0.0, 0.0), 0.0, 300.0))


# ---------------------------------------------------------------- observations
def test_head_on_observation_values():
    cfg = SimConfig(scenario="head_on")
    sim = ReferenceSim(cfg)
    layout = ObsLayout.from_config(cfg)
    obs = sim.reset(initial_conditions(cfg, 0, 0, 0))
    assert len(obs) == 2 and all(len(o) == layout.size for o in obs)
    for side in range(2):
        o = dict(zip(layout.names, obs[side], strict=True))
        assert o["own.x"] == pytest.approx((-14_000 if side == 0 else 14_000) / 75_000)
        assert o["own.speed"] == pytest.approx(0.6)
        assert (o["own.missiles_left"], o["own.fire_ready"], o["own.alive"]) == (1.0, 1.0, 1.0)
        assert (o["own.throttle"], o["own.rudder"]) == (1.0, 0.0)
        assert o["enemy.range"] == pytest.approx(0.56)
        assert o["enemy.bearing_cos"] == pytest.approx(1.0)
        assert o["enemy.bearing_sin"] == pytest.approx(0.0, abs=1e-12)
        assert o["enemy.rel_heading_cos"] == pytest.approx(-1.0)
        assert o["enemy.closing_speed"] == pytest.approx(0.6)
        assert o["enemy.nose_on_cos"] == pytest.approx(1.0)
        assert o["time.time_left"] == 1.0
        assert o["incoming[0].present"] == 0.0 and o["own_missile[0].present"] == 0.0
    out = sim.step([STRAIGHT_FIRE, STRAIGHT_FULL])
    red = dict(zip(layout.names, out.obs[0], strict=True))
    blue = dict(zip(layout.names, out.obs[1], strict=True))
    assert red["own.fire_ready"] == 1.0  # 5 steps since launch = the cooldown
    assert red["own_missile[0].present"] == 1.0 and red["own_missile[0].motor_on"] == 1.0
    assert red["own_missile[0].flight_time"] == pytest.approx(0.5 / 90.0)
    assert blue["incoming[0].present"] == 1.0 and blue["incoming[1].present"] == 0.0
    assert blue["incoming[0].bearing_cos"] == pytest.approx(1.0)
    assert blue["incoming[0].heading_cos"] == pytest.approx(-1.0)
    assert blue["enemy.missiles_left"] == pytest.approx(5 / 6)


def test_incoming_missiles_are_sorted_nearest_first():
    cfg = SimConfig(arena_half_width_m=FAR)
    sim = ReferenceSim(cfg)
    sim.reset(ic((0, 0), 0.0, 300.0, (50_000, 0), math.pi, 300.0))
    for slot, x in ((0, 30_000.0), (1, 10_000.0), (2, 20_000.0)):
        m = sim.missiles[1][slot]
        m.active, m.pos, m.vel = True, [x, 0.0], [-800.0, 0.0]
    layout = ObsLayout.from_config(cfg)
    obs = sim.observe()[0]
    ranges = [obs[layout.index(f"incoming[{i}].range")] for i in range(3)]
    assert ranges == pytest.approx([0.2, 0.4, 0.6])
    assert obs[layout.index("incoming[3].present")] == 0.0


def test_observation_is_clamped():
    cfg = SimConfig(arena_half_width_m=FAR)
    sim = ReferenceSim(cfg)
    layout = ObsLayout.from_config(cfg)
    obs = sim.reset(ic((0, 0), 0.0, 300.0, (2e6, 0), math.pi, 300.0))
    assert obs[0][layout.index("enemy.range")] == OBS_CLIP  # 40 before the clamp
