"""Missile tables, reach and escape estimates (sim/reach/spacetime.py, sim/reach/tables.py) against sim.md
and the simulator."""

from __future__ import annotations

import math

import pytest
import torch

from sim import BatchedSim, SimConfig
from sim.layout import MISSILE_SPEED_SCALE_MPS
from sim.reach.missile import missile_tables
from sim.reach.spacetime import (
    MARGIN_HORIZON_S,
    escape_time_margin,
    own_reach_straight,
    reach_by_time,
    reach_features,
    reach_straight,
    reach_turning_away,
)
from sim.reach.truth import measure_reach

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
    # Spent for good once it has slowed past the sim's loss speed (200 m/s) after burn-out.
    live = tables.live[i]
    first_dead = int((~live).nonzero()[0])
    assert float(speed[first_dead]) < CONFIG.missile_min_speed_mps <= float(speed[first_dead - 1])
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


# Coarse grid: shooter and target speeds 250-450 m/s; head-on, tail, beam and oblique targets
# flying straight, and turning away from head-on, beam and oblique aspects.
COARSE_GRID = [
    # shooter m/s, target m/s, aspect deg (0: flying away, 180: at the shooter), turning away
    (300.0, 300.0, 180.0, False), (450.0, 250.0, 0.0, False), (250.0, 450.0, 90.0, False),
    (400.0, 350.0, 135.0, False), (350.0, 400.0, 180.0, True), (450.0, 300.0, 90.0, True),
    (250.0, 250.0, 45.0, True), (300.0, 450.0, 0.0, False),
]


def test_reach_agrees_with_shots_in_the_simulator_within_3_percent(tables):
    # The truth: shots fired in one BatchedSim, the largest range that hits (to 69 m).
    vs, vt, aspect_deg, escape = (torch.tensor(c) for c in zip(*COARSE_GRID, strict=True))
    aspect = torch.deg2rad(aspect_deg.double())
    truth = measure_reach(CONFIG, vs, vt, aspect, escape, candidates=12)
    model = torch.where(
        escape,
        reach_turning_away(tables, vs.double(), vt.double(), aspect.cos(), aspect.sin()),
        reach_straight(tables, vs.double(), vt.double(), aspect.cos(), aspect.sin()),
    )
    ratio = model / truth
    assert bool((truth > 5_000).all()), truth
    assert bool(((ratio - 1).abs() < 0.03).all()), list(zip(COARSE_GRID, ratio.tolist(), strict=True))


def test_reach_orders_the_geometries_sensibly(tables):
    v = torch.full((4,), 300.0, dtype=torch.float64)
    ang = torch.tensor([math.pi, math.pi / 2, 0.0, 3 * math.pi / 4], dtype=torch.float64)
    straight = reach_straight(tables, v, v, ang.cos(), ang.sin())
    away = reach_turning_away(tables, v, v, ang.cos(), ang.sin())
    head_on, beam, tail, oblique = straight.tolist()
    assert head_on > oblique > beam > tail > 0
    # Mirror images reach alike.
    assert torch.allclose(reach_straight(tables, v, v, ang.cos(), -ang.sin()), straight)
    # Turning away (at full throttle) never helps the missile; it helps most head-on.
    assert bool((away <= straight + 1e-6).all())
    assert away[0] < 0.4 * straight[0]
    # A faster launcher reaches further, and so does a shot at a slower target flying away.
    fast = reach_straight(tables, v * 1.5, v, ang.cos(), ang.sin())
    assert bool((fast > straight).all())
    assert float(reach_straight(tables, v[:1], v[:1] * 0.8, _t(1.0), _t(0.0))) > tail


def test_reach_by_time_grows_to_the_reach(tables):
    v = torch.full((3,), 350.0, dtype=torch.float64)
    ang = torch.tensor([math.pi, math.pi / 2, 0.0], dtype=torch.float64)
    times = torch.arange(0.0, 121.0, 1.0, dtype=torch.float64)
    for escape, reach_fn in ((False, reach_straight), (True, reach_turning_away)):
        by_time = reach_by_time(tables, escape, v, v, ang.cos(), ang.sin(), times)
        assert bool((by_time[:, 0] == 0).all())
        assert bool((by_time[:, 1:] >= by_time[:, :-1] - 1e-6).all())
        assert torch.allclose(by_time[:, -1], reach_fn(tables, v, v, ang.cos(), ang.sin()))
    # A missile needs time: 10 s after launch it has caught nothing beyond its 10 s flight
    # plus what a head-on target flies towards it.
    ten = reach_by_time(tables, False, v[:1], v[:1], _t(-1.0), _t(0.0), torch.tensor([10.0]))
    assert float(ten) < float(tables.distance_m[_row(tables, 350.0), 20]) + 350 * 10 + 200


def test_escape_time_margin_counts_down_to_the_escape_reach(tables):
    # Head-on at 300 m/s each, 40 km apart: the range closes at 600 m/s and the geometry never
    # changes, so the margin is (range - escape reach) / 600.
    reach = float(reach_turning_away(tables, _t(300.0), _t(300.0), _t(-1.0), _t(0.0)))
    for rng in (40_000.0, 20_000.0, 10_000.0):
        margin = escape_time_margin(tables, _t(rng), _t(0.0), _t(300.0), _t(0.0), _t(-300.0), _t(0.0))
        assert float(margin) == pytest.approx((rng - reach) / 600.0, abs=0.3)
    # Flying apart outside the reach: never inside, the margin is the horizon.
    apart = escape_time_margin(tables, _t(30_000.0), _t(0.0), _t(-300.0), _t(0.0), _t(300.0), _t(0.0))
    assert float(apart) == MARGIN_HORIZON_S


@pytest.mark.parametrize("factor, hits", [(0.92, True), (1.5, False)])
def test_reach_separates_hits_from_misses_in_the_simulator(tables, factor, hits):
    # Head-on at 300 m/s the reach is about 62 km: a shot at a straight flyer from just inside
    # it hits; from far outside it the missile is lost.
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
    # 28 km head-on: inside the straight-flight reach (62 km); turning away (reach about
    # 17 km) still escapes a launch now, for about (28 - 17) km / 600 m/s more.
    assert bool(f.enemy_in_own_reach.all()) and bool(f.own_escape_possible.all())
    expected_margin = (f.range_m - f.enemy_reach_escape_m) / 600.0
    assert torch.allclose(f.escape_margin_s, expected_margin, atol=0.3)
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
