"""Physics checks from sim.md on the batched simulator (float64, one environment)."""

from __future__ import annotations

import math

import pytest
import torch

from sim import BatchedSim, SimConfig


def _one(config: SimConfig) -> BatchedSim:
    sim = BatchedSim(1, config=config)
    sim.reset()
    return sim


def _speed(sim: BatchedSim, side: int = 0) -> float:
    return math.hypot(float(sim.state.f_vx[side, 0]), float(sim.state.f_vy[side, 0]))


def _run(sim: BatchedSim, actions: list[list[int]], decisions: int) -> None:
    a = torch.tensor([actions])
    for _ in range(decisions):
        out = sim.step(a)
        assert not bool(out.done[0]), "episode ended during a physics check"


def test_top_speed_at_full_throttle_straight() -> None:
    config = SimConfig(dtype="float64", scenario="head_on", max_time_s=1000.0, arena_half_width_m=500_000.0)
    sim = _one(config)
    _run(sim, [[1, 2, 0], [1, 2, 0]], 600)  # 300 s
    assert _speed(sim) == pytest.approx(489.9, abs=0.1)


@pytest.mark.parametrize("dt_s, substeps", [(0.1, 5), (1 / 60, 30)])
def test_full_rudder_full_throttle_speed_is_the_analytic_value(dt_s: float, substeps: int) -> None:
    config = SimConfig(dtype="float64", scenario="head_on", dt_s=dt_s, substeps=substeps, max_time_s=1000.0)
    sim = _one(config)
    _run(sim, [[2, 2, 0], [0, 2, 0]], 240)  # 120 s of full rudder
    fighter = config.fighter
    analytic = math.sqrt(fighter.max_thrust_mps2 / (fighter.cd0 + fighter.induced_drag_factor * fighter.lift_factor**2))
    assert analytic == pytest.approx(255.9, abs=0.05)
    assert _speed(sim) == pytest.approx(analytic, abs=0.05)


@pytest.mark.parametrize("dt_s, peak_range", [(0.1, (1264.0, 1273.0)), (1 / 60, (1263.0, 1266.0))])
def test_missile_peak_speed_and_distance(dt_s: float, peak_range: tuple[float, float]) -> None:
    # sim.md: about 1265 (dt 1/60 s) to 1272 m/s (dt 0.1 s); the exact 10 s burn gives 1266.9 at
    # dt 0.1 s (sim/RULES.md, "Burn-out speed"). Distance after 20 s: 18.0-18.1 km.
    steps_per_decision = round(0.5 / dt_s)
    config = SimConfig(dtype="float64", scenario="head_on", dt_s=dt_s, substeps=1, max_time_s=1000.0)
    sim = _one(config)
    s = sim.state
    # Blue flies straight ahead of red along the same line: PN commands zero rudder.
    s.f_px[:, 0] = torch.tensor([-30_000.0, 40_000.0], dtype=torch.float64)
    s.f_py[:, 0] = 0.0
    s.f_vx[:, 0] = 300.0
    s.f_vy[:, 0] = 0.0
    sim.step(torch.tensor([[[1, 1, 1], [1, 1, 0]]]))  # launch at the first physics step
    start = float(s.m_px[0, 0, 0])
    assert bool(s.m_active[0, 0, 0])
    speeds = [math.hypot(float(s.m_vx[0, 0, 0]), float(s.m_vy[0, 0, 0]))]
    hold = torch.tensor([[[1, 1, 0], [1, 1, 0]]])
    for _ in range(round(20.0 / dt_s) - 1):
        sim.step(hold)
        speeds.append(math.hypot(float(s.m_vx[0, 0, 0]), float(s.m_vy[0, 0, 0])))
    peak = max(speeds)
    burn = config.burn_steps
    assert speeds.index(peak) == burn - 1  # the peak is at burn-out
    assert peak_range[0] <= peak <= peak_range[1]
    flown = float(s.m_px[0, 0, 0]) - start + config.launch_offset_m
    assert 17_950.0 <= flown <= 18_150.0
    assert steps_per_decision >= 1


def test_turn_radius_at_full_rudder_is_rmin() -> None:
    config = SimConfig(dtype="float64", scenario="head_on", max_time_s=1000.0)
    sim = _one(config)
    s = sim.state
    s.f_throttle[:, 0] = 0.0
    xs, ys = [], []
    for _ in range(40):
        sim.step(torch.tensor([[[2, 0, 0], [1, 2, 0]]]))
        xs.append(float(s.f_px[0, 0]))
        ys.append(float(s.f_py[0, 0]))
    # Curvature from three successive positions: speed changes, radius does not.
    (x1, y1), (x2, y2), (x3, y3) = (xs[-3], ys[-3]), (xs[-2], ys[-2]), (xs[-1], ys[-1])
    a, b, c = math.dist((x1, y1), (x2, y2)), math.dist((x2, y2), (x3, y3)), math.dist((x1, y1), (x3, y3))
    area2 = abs((x2 - x1) * (y3 - y1) - (y2 - y1) * (x3 - x1))
    radius = a * b * c / (2 * area2)
    assert radius == pytest.approx(1000.0, rel=2e-3)
