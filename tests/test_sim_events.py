"""Events built on purpose in the batched simulator: swept hits, sub-step kills, draws, limits."""

from __future__ import annotations

import math

import torch

from sim import BatchedSim, SimConfig
from sim.kernels import (
    END_AMMO_OUT,
    END_KILL,
    END_MUTUAL_KILL,
    END_OUT_OF_ARENA,
    END_TIME_LIMIT,
    WINNER_BLUE,
    WINNER_DRAW,
    WINNER_RED,
)

HOLD = torch.tensor([[[1, 2, 0], [1, 2, 0]]])  # straight, full throttle, no fire (both sides)


def _sim(**overrides: object) -> BatchedSim:
    sim = BatchedSim(1, config=SimConfig(dtype="float64", scenario="head_on", **overrides))
    sim.reset()
    return sim


def _fighter(sim: BatchedSim, side: int, pos: tuple[float, float], vel: tuple[float, float]) -> None:
    s = sim.state
    s.f_px[side, 0], s.f_py[side, 0] = pos
    s.f_vx[side, 0], s.f_vy[side, 0] = vel


def _missile(sim: BatchedSim, side: int, slot: int, pos: tuple[float, float], vel: tuple[float, float],
             flight_steps: int = 20) -> None:
    s = sim.state
    s.m_active[side, slot, 0] = True
    s.m_px[side, slot, 0], s.m_py[side, slot, 0] = pos
    s.m_vx[side, slot, 0], s.m_vy[side, slot, 0] = vel
    s.m_steps[side, slot, 0] = flight_steps


def test_swept_hit_catches_a_missile_that_tunnels_past_a_step_end_test() -> None:
    sim = _sim(substeps=1)
    _fighter(sim, 0, (-30_000.0, 0.0), (300.0, 0.0))
    _fighter(sim, 1, (0.0, 0.0), (0.0, 300.0))
    # Relative velocity (1300, 0): 130 m per step, passing 85 m abeam of blue.
    start = (-65.0, 85.0)
    _missile(sim, 0, 0, start, (1300.0, 300.0))
    assert math.hypot(*start) > 100.0
    out = sim.step(HOLD)
    s = sim.state
    rel_end = (float(s.m_px[0, 0, 0] - s.f_px[1, 0]), float(s.m_py[0, 0, 0] - s.f_py[1, 0]))
    assert math.hypot(*rel_end) > 100.0, "a step-end test would have missed this pass"
    assert bool(out.terminated[0]) and int(out.winner[0]) == WINNER_RED
    assert int(out.end_reason[0]) == END_KILL
    assert out.hits[0].tolist() == [1, 0]
    assert out.reward[0].tolist() == [1.0, -1.0]


def test_kill_on_substep_three_of_five_is_reported_and_frozen() -> None:
    sim = _sim()
    _fighter(sim, 0, (-30_000.0, 0.0), (300.0, 0.0))
    _fighter(sim, 1, (0.0, 0.0), (-300.0, 0.0))
    _missile(sim, 0, 0, (-350.0, 0.0), (700.0, 0.0))  # closing at 1000 m/s: 350 → 250 → 150 → 50
    out = sim.step(HOLD)
    assert bool(out.terminated[0]) and not bool(out.truncated[0])
    assert int(out.winner[0]) == WINNER_RED and int(out.end_reason[0]) == END_KILL
    assert int(out.episode_steps[0]) == 1
    # The episode ended in physics step 3; the final observation shows the frozen state.
    enemy_alive = sim.layout.index("enemy.alive")
    assert float(out.final_obs[0, 0, enemy_alive]) == 0.0
    time_left = float(out.final_obs[0, 0, sim.layout.index("time.time_left")])
    assert math.isclose(time_left, 1 - 3 * 0.1 / 300.0, rel_tol=1e-9)
    # Auto-reset: the returned obs is a fresh episode.
    assert float(out.obs[0, 0, enemy_alive]) == 1.0
    assert int(sim.state.episode_index[0]) == 1


def test_mutual_kill_in_one_physics_step_is_a_draw() -> None:
    sim = _sim()
    _fighter(sim, 0, (-1000.0, 0.0), (300.0, 0.0))
    _fighter(sim, 1, (1000.0, 0.0), (-300.0, 0.0))
    _missile(sim, 0, 0, (700.0, 0.0), (1000.0, 0.0))
    _missile(sim, 1, 0, (-700.0, 0.0), (-1000.0, 0.0))
    out = sim.step(HOLD)
    assert bool(out.terminated[0])
    assert int(out.winner[0]) == WINNER_DRAW and int(out.end_reason[0]) == END_MUTUAL_KILL
    assert out.reward[0].tolist() == [0.0, 0.0]
    assert out.hits[0].tolist() == [1, 1]


def test_ammunition_out_is_a_draw() -> None:
    sim = _sim()
    sim.state.f_ammo.zero_()
    out = sim.step(HOLD)
    assert bool(out.terminated[0])
    assert int(out.winner[0]) == WINNER_DRAW and int(out.end_reason[0]) == END_AMMO_OUT
    assert out.reward[0].tolist() == [0.0, 0.0]


def test_last_missile_in_flight_delays_ammo_out() -> None:
    sim = _sim()
    sim.state.f_ammo.zero_()
    _missile(sim, 0, 0, (-20_000.0, 5000.0), (300.0, 0.0), flight_steps=0)  # far from blue
    out = sim.step(HOLD)
    assert not bool(out.done[0])


def test_time_limit_truncates_and_does_not_terminate() -> None:
    sim = _sim(max_time_s=2.0)
    for _ in range(3):
        out = sim.step(HOLD)
        assert not bool(out.done[0])
    out = sim.step(HOLD)
    assert bool(out.truncated[0]) and not bool(out.terminated[0])
    assert int(out.winner[0]) == WINNER_DRAW and int(out.end_reason[0]) == END_TIME_LIMIT
    assert out.reward[0].tolist() == [0.0, 0.0]
    assert int(out.episode_steps[0]) == 4


def test_leaving_the_arena_destroys() -> None:
    sim = _sim()
    _fighter(sim, 0, (74_990.0, 0.0), (300.0, 0.0))
    out = sim.step(HOLD)
    assert bool(out.terminated[0])
    assert int(out.winner[0]) == WINNER_BLUE and int(out.end_reason[0]) == END_OUT_OF_ARENA
    assert out.reward[0].tolist() == [-1.0, 1.0]


def test_one_fire_command_launches_one_missile_and_cooldown_holds() -> None:
    sim = _sim(time_scale=4.0)  # 20 physics steps per decision, cooldown 5 steps
    fire = torch.tensor([[[1, 2, 1], [1, 2, 0]]])
    out = sim.step(fire)
    assert out.launches[0].tolist() == [1, 0]
    assert int(sim.state.f_ammo[0, 0]) == 5
    out = sim.step(fire)
    assert out.launches[0].tolist() == [1, 0]
    assert sim.state.m_active[0, :, 0].tolist()[:2] == [True, True]


def test_masked_reset_leaves_every_other_environment_bit_identical() -> None:
    sim = BatchedSim(64, config=SimConfig(), seed=4)
    sim.reset()
    gen = torch.Generator().manual_seed(1)
    for _ in range(30):
        a = torch.stack([torch.randint(0, 3, (64, 2), generator=gen),
                         torch.randint(0, 3, (64, 2), generator=gen),
                         (torch.rand(64, 2, generator=gen) < 0.2).long()], dim=-1)
        sim.step(a)
    before = sim.state.clone()
    obs_before = sim._obs.clone()
    mask = torch.zeros(64, dtype=torch.bool)
    mask[::3] = True
    obs = sim.reset(mask)
    for name, tensor in sim.state.tensors().items():
        old = before.tensors()[name]
        assert torch.equal(tensor[..., ~mask], old[..., ~mask]), f"{name} changed in an unmasked env"
    assert torch.equal(obs[~mask], obs_before[~mask])
    assert torch.equal(sim.state.episode_index[mask], before.episode_index[mask] + 1)
    assert bool((sim.state.physics_steps[mask] == 0).all())
    assert bool(sim.state.f_alive[:, mask].all())


def test_same_seed_same_episodes_at_any_batch_size() -> None:
    small = BatchedSim(3, seed=9)
    large = BatchedSim(50, seed=9)
    assert torch.equal(small.reset(), large.reset()[:3])
