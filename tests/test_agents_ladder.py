"""Scripted opponents in the real simulator: each does what its docstring says, and together
they form a ladder. Every test runs its episodes batched, so each takes seconds."""

from __future__ import annotations

import math

import pytest
import torch

from agents import make_agent
from pipeline.evaluation.matches import play_match
from sim import BatchedSim, SimConfig

HEAD_ON = SimConfig(scenario="head_on")
RANDOM = SimConfig()


@pytest.fixture(autouse=True)
def one_thread():
    """Batched runs of small tensors go fastest, and share the machine best, on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _idx(sim: BatchedSim, name: str) -> int:
    return sim.layout.index(name)


def _duel(red: str, blue: str, n: int, config: SimConfig, steps: int, seed: int = 0):
    """Run ``steps`` decisions; yields (obs before, StepResult) per step (results cloned)."""
    torch.manual_seed(seed)
    sim = BatchedSim(n, config, seed=seed)
    agents = [make_agent(s, n, sim.layout, sim_config=config) for s in (red, blue)]
    obs = sim.reset()
    for _ in range(steps):
        before = obs.clone()  # the simulator overwrites its observation buffer in step()
        out = sim.step(torch.stack([agents[0].act(obs[:, 0]), agents[1].act(obs[:, 1])], dim=1))
        obs = out.obs
        yield sim, before, out


def test_straight_keeps_its_heading():
    heads = []
    for sim, before, out in _duel("straight", "pursuit", 64, RANDOM, 20, seed=1):
        assert not bool(out.done.any())
        heads.append(before[:, 0, _idx(sim, "own.heading_cos"):_idx(sim, "own.heading_sin") + 1])
    heads = torch.stack(heads)
    assert torch.allclose(heads, heads[0].expand_as(heads), atol=1e-5)


def test_pursuit_points_at_its_target():
    bearings = []
    for sim, before, _out in _duel("straight", "pursuit", 128, RANDOM, 60, seed=2):
        bc = before[:, 1, _idx(sim, "enemy.bearing_cos")]
        bs = before[:, 1, _idx(sim, "enemy.bearing_sin")]
        bearings.append(torch.atan2(bs, bc).abs())
    bearings = torch.stack(bearings)
    assert float(bearings[0].max()) > math.radians(20)  # some starts begin well off the nose
    # After 20 s the pursuers hold the straight flyer within a few degrees of the nose (the
    # bang-bang rudder swings a little, more so when the two pass close by).
    late = bearings[40:].flatten()
    assert float(late.median()) < math.radians(3)
    assert float(late.quantile(0.95)) < math.radians(8)


def test_shooter_fires_inside_its_cone_with_one_missile_in_flight():
    launches = 0
    for sim, before, out in _duel("shooter", "straight", 128, RANDOM, 80, seed=3):
        red = before[:, 0]
        fired = out.launches[:, 0] > 0
        launches += int(fired.sum())
        bearing = torch.atan2(red[:, _idx(sim, "enemy.bearing_sin")], red[:, _idx(sim, "enemy.bearing_cos")])
        assert bool((bearing[fired].abs() <= math.radians(30) + 1e-4).all())
        assert bool((red[fired, _idx(sim, "own_missile[0].present")] == 0).all())
        assert bool((out.final_obs[:, 0, _idx(sim, "own_missile[1].present")] == 0).all())
    assert launches >= 128  # every environment shot at least once


def test_crank_holds_fifty_degrees_while_its_missile_flies():
    # Head-on against a straight flyer: crank launches at once (28 km is inside its reach),
    # turns to put the target about 50° off the nose and holds it there until the hit.
    off_nose = []
    for sim, before, out in _duel("crank", "straight", 4, HEAD_ON, 60):
        red = before[:, 0]
        if bool(out.done.any()):
            assert bool((out.winner == 0).all())
            break
        assert bool((red[:, _idx(sim, "own_missile[0].present")] == 1).all()) or not off_nose
        angle = torch.atan2(red[:, _idx(sim, "enemy.bearing_sin")].abs(), red[:, _idx(sim, "enemy.bearing_cos")])
        off_nose.append(torch.rad2deg(angle))
    else:
        raise AssertionError("crank never hit the straight flyer")
    held = torch.stack(off_nose[12:])  # after the turn onto the crank angle (6 s)
    assert len(off_nose) > 20
    # A whole-rudder command per 0.5 s decision swings a few degrees about the crank angle.
    assert abs(float(held.mean()) - 50) < 3
    assert float(held.min()) > 42 and float(held.max()) < 58


def test_crank_turns_away_from_an_inbound_missile_and_survives():
    tail_on = False
    for sim, before, out in _duel("crank", "shooter", 4, HEAD_ON, 200):
        red = before[:, 0]
        present = red[:, _idx(sim, "incoming[0].present")] == 1
        behind = red[:, _idx(sim, "incoming[0].bearing_cos")] < -0.9
        tail_on |= bool((present & behind).all())
        if bool(out.done.any()):
            assert bool((out.winner == 0).all()) and bool(out.done.all())
            break
    assert tail_on  # it put the shooter's missile on its tail at some point


def test_shooter_beats_straight_from_head_on_and_random_starts():
    for config, episodes in ((HEAD_ON, 16), (RANDOM, 512)):
        stats = play_match("shooter", "straight", episodes, config, seed=11)
        assert stats.wins >= 0.95 * stats.episodes, (config.scenario, stats)


def test_crank_beats_shooter_more_often_than_it_loses():
    stats = play_match("crank", "shooter", 512, RANDOM, seed=12)
    assert stats.wins > stats.losses, stats
