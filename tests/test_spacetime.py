"""Missile tables and reach estimates (sim/spacetime.py) against sim.md and the simulator."""

from __future__ import annotations

import math

import pytest
import torch

from sim import BatchedSim, SimConfig
from sim.layout import MISSILE_SPEED_SCALE_MPS
from sim.spacetime import (
    SPENT_SPEED_MPS,
    missile_tables,
    own_reach_straight,
    reach_features,
    reach_straight,
    reach_turning_away,
)

CONFIG = SimConfig()


@pytest.fixture(scope="module")
def tables():
    return missile_tables(CONFIG)


def _row(tables, speed: float) -> int:
    return tables.carrier_speeds_mps.tolist().index(speed)


def _t(x: float) -> torch.Tensor:
    return torch.tensor([x], dtype=torch.float64)


def test_tables_match_the_numbers_in_sim_md(tables):
    i = _row(tables, 300.0)
    speed, dist, times = tables.speed_mps[i], tables.distance_m[i], tables.times_s
    # Peak at motor burn-out (10 s): about 1265–1272 m/s; about 18.0–18.1 km flown after 20 s.
    assert int(speed.argmax()) == int((times - 10.0).abs().argmin())
    assert 1260 < float(speed.max()) < 1275
    assert 18_000 < float(dist[int((times - 20.0).abs().argmin())]) < 18_100
    assert float(times[-1]) == pytest.approx(CONFIG.missile_max_flight_time_s)
    # Spent (below Mach 1) for good once it has slowed past 340 m/s after burn-out.
    live = tables.live[i]
    first_dead = int((~live).nonzero()[0])
    assert float(speed[first_dead]) < SPENT_SPEED_MPS <= float(speed[first_dead - 1])
    assert not bool(live[first_dead:].any())


def test_faster_carriers_give_longer_flights(tables):
    final_live_dist = torch.where(tables.live, tables.distance_m, 0.0).max(dim=1).values
    assert bool((final_live_dist[1:] > final_live_dist[:-1]).all())
    assert bool((tables.distance_m[:, 1:] >= tables.distance_m[:, :-1]).all())


def test_tables_reproduce_a_missile_in_the_simulator(tables):
    # Head-on: red launches at once straight at blue, who flies straight at it, so the line
    # of sight never turns and the missile flies straight: its speed must follow the table.
    sim = BatchedSim(1, SimConfig(scenario="head_on"))
    obs = sim.reset()
    fire = torch.tensor([[[1, 2, 1], [1, 2, 0]]])
    hold = torch.tensor([[[1, 2, 0], [1, 2, 0]]])
    i_speed = sim.layout.index("own_missile[0].speed")
    i_time = sim.layout.index("own_missile[0].flight_time")
    out = sim.step(fire)
    checked = 0
    for _ in range(40):
        obs = out.obs[0, 0]
        if obs[sim.layout.index("own_missile[0].present")] == 0:
            break
        t = float(obs[i_time]) * CONFIG.missile_max_flight_time_s
        k = round(t / 0.5)
        assert abs(t - 0.5 * k) < 1e-3
        speed_table = float(tables.speed_mps[_row(tables, 300.0), k])
        assert float(obs[i_speed]) * MISSILE_SPEED_SCALE_MPS == pytest.approx(speed_table, rel=2e-3)
        checked += 1
        out = sim.step(hold)
    assert checked >= 10


def test_reach_against_a_standing_target_is_the_live_flight_distance(tables):
    r = reach_straight(tables, _t(300.0), _t(0.0), _t(1.0), _t(0.0))
    i = _row(tables, 300.0)
    expected = float(tables.distance_m[i][tables.live[i]].max()) + CONFIG.launch_offset_m
    assert float(r) == pytest.approx(expected)


def test_reach_orders_the_geometries_sensibly(tables):
    v = torch.full((4,), 300.0, dtype=torch.float64)
    ang = torch.tensor([math.pi, math.pi / 2, 0.0, 3 * math.pi / 4], dtype=torch.float64)
    straight = reach_straight(tables, v, v, ang.cos(), ang.sin())
    away = reach_turning_away(tables, v, v, ang.cos(), ang.sin())
    head_on, beam, tail, oblique = straight.tolist()
    assert head_on > oblique > beam > tail > 0
    # Head-on, a 300 m/s target adds 300 m/s × flight time to the missile's own reach.
    assert head_on == pytest.approx(float(reach_straight(tables, v[:1], v[:1] * 0, _t(1.0), _t(0.0))) + 300 * 45, rel=0.02)
    # Turning away never helps the missile; for a target already flying away it changes nothing.
    assert bool((away <= straight + 1e-6).all())
    assert away[2] == pytest.approx(straight[2])
    assert away[0] < 0.6 * straight[0]
    # A faster launcher reaches further.
    fast = reach_straight(tables, v * 1.5, v, ang.cos(), ang.sin())
    assert bool((fast > straight).all())


@pytest.mark.parametrize("factor, hits", [(0.92, True), (1.5, False)])
def test_reach_separates_hits_from_misses_in_the_simulator(tables, factor, hits):
    # Head-on at 300 m/s the reach is about 43.5 km: a shot at a straight flyer from just inside
    # it hits; from far outside it the missile is lost (the Mach-1 rule keeps a margin).
    reach = float(reach_straight(tables, _t(300.0), _t(300.0), _t(-1.0), _t(0.0)))
    config = SimConfig(scenario="head_on", head_on_separation_m=factor * reach)
    sim = BatchedSim(1, config)
    sim.reset()
    out = sim.step(torch.tensor([[[1, 1, 1], [1, 1, 0]]]))
    scored = int(out.hits[0, 0])
    in_flight = sim.layout.index("own_missile[0].present")
    for _ in range(config.max_decisions):
        if bool(out.done.any()) or float(out.obs[0, 0, in_flight]) == 0:
            break
        # Half throttle keeps both inside the arena for the whole flight of the missile.
        out = sim.step(torch.tensor([[[1, 1, 0], [1, 1, 0]]]))
        scored += int(out.hits[0, 0])
    assert (scored == 1) == hits
    assert bool(out.done[0]) == hits


def test_reach_features_from_observations(tables):
    sim = BatchedSim(2, SimConfig(scenario="head_on"))
    obs = sim.reset()[:, 0]
    f = reach_features(obs, sim.layout, tables)
    expected = float(reach_straight(tables, _t(300.0), _t(300.0), _t(-1.0), _t(0.0)))
    assert f.range_m.tolist() == pytest.approx([28_000.0] * 2, rel=1e-5)
    assert f.own_reach_straight_m.tolist() == pytest.approx([expected] * 2, rel=1e-4)
    assert f.enemy_reach_straight_m.tolist() == pytest.approx([expected] * 2, rel=1e-4)
    assert bool((f.own_reach_escape_m < f.own_reach_straight_m).all())
    # 28 km head-on: inside the straight-flight reach (43.5 km); turning away (reach about
    # 19.6 km) still escapes a launch now.
    assert bool(f.enemy_in_own_reach.all()) and bool(f.own_escape_possible.all())
    assert torch.allclose(own_reach_straight(obs, sim.layout, tables), f.own_reach_straight_m)
    with pytest.raises(ValueError, match="obs must have shape"):
        reach_features(obs[:, :5], sim.layout, tables)


def test_bad_table_arguments_are_refused():
    with pytest.raises(ValueError, match="positive and increasing"):
        missile_tables(CONFIG, carrier_speeds_mps=(300.0, 200.0))
    with pytest.raises(ValueError, match="whole multiple of dt_s"):
        missile_tables(CONFIG, sample_dt_s=0.25)
    with pytest.raises(ValueError, match="at least 2 speeds"):
        missile_tables(CONFIG, carrier_speeds_mps=(300.0,))
