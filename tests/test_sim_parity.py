"""Parity: the batched simulator against the scalar reference, step by step.

Every test runs on both CPU backends (the torch path and the native kernel of sim/native/).
Random action sequences on many environments; every decision step compares the full state,
observations, rewards, flags, outcome and event counts, and every auto-reset re-seeds the
reference from the batched simulator's own episode counter (checking the reset obs too).
"""

from __future__ import annotations

import math

import pytest
import torch

from sim import BatchedSim, SimConfig
from sim.reference.scalar import ReferenceSim
from sim.scenarios import initial_conditions

REL = 1e-4
# Near zero a relative tolerance means nothing: positions are compared relative to at least
# 1 km and velocities to at least 10 m/s (so 0.1 m and 1 mm/s absolute there).
POS_SCALE_M = 1_000.0
VEL_SCALE_MPS = 10.0
BACKENDS = ["torch", "native"]


def _assert_vec_close(bx: float, by: float, ref: list[float], scale: float, what: str) -> None:
    """Vectors are compared by the norm of their difference relative to their own norm."""
    err = math.hypot(bx - ref[0], by - ref[1])
    size = max(math.hypot(bx, by), math.hypot(*ref), scale)
    assert err <= REL * size, f"{what}: batched ({bx}, {by}) vs reference {ref} (error {err:.3g})"


def _compare_state(sim: BatchedSim, refs: list[ReferenceSim], step: int) -> None:
    s = {k: v.cpu() for k, v in sim.state.tensors().items()}
    m = sim.config.missiles_per_fighter
    for i, ref in enumerate(refs):
        where = f"step {step} env {i}"
        for side in range(2):
            f = ref.fighters[side]
            assert bool(s["f_alive"][side, i]) == f.alive, f"{where} side {side} alive"
            assert int(s["f_ammo"][side, i]) == f.missiles_left, f"{where} side {side} ammo"
            assert int(s["f_since_launch"][side, i]) == f.since_launch_steps, f"{where} since"
            _assert_vec_close(float(s["f_px"][side, i]), float(s["f_py"][side, i]), f.pos,
                              POS_SCALE_M, f"{where} fighter {side} position")
            _assert_vec_close(float(s["f_vx"][side, i]), float(s["f_vy"][side, i]), f.vel,
                              VEL_SCALE_MPS, f"{where} fighter {side} velocity")
            for k in range(m):
                rm = ref.missiles[side][k]
                assert bool(s["m_active"][side, k, i]) == rm.active, f"{where} missile {side}/{k} active"
                if not rm.active:
                    continue
                assert int(s["m_steps"][side, k, i]) == rm.flight_steps, f"{where} missile steps"
                _assert_vec_close(float(s["m_px"][side, k, i]), float(s["m_py"][side, k, i]), rm.pos,
                                  POS_SCALE_M, f"{where} missile {side}/{k} position")
                _assert_vec_close(float(s["m_vx"][side, k, i]), float(s["m_vy"][side, k, i]), rm.vel,
                                  VEL_SCALE_MPS, f"{where} missile {side}/{k} velocity")
        assert int(s["physics_steps"][i]) == ref.physics_steps, f"{where} physics steps"


def _compare_obs(obs: torch.Tensor, ref_obs: list[list[float]], names: tuple[str, ...], where: str) -> None:
    for side in range(2):
        row = obs[side].tolist()
        for j, (a, b) in enumerate(zip(row, ref_obs[side], strict=True)):
            assert abs(a - b) <= REL * max(1.0, abs(b)), f"{where} side {side} obs {names[j]}: {a} vs {b}"


def _random_actions(gen: torch.Generator, n: int, fire_p: float) -> torch.Tensor:
    rudder = torch.randint(0, 3, (n, 2), generator=gen)
    throttle = torch.randint(0, 3, (n, 2), generator=gen)
    fire = (torch.rand(n, 2, generator=gen) < fire_p).long()
    return torch.stack([rudder, throttle, fire], dim=-1)


def _run_parity(config: SimConfig, num_envs: int, steps: int, seed: int, fire_p: float,
                backend: str) -> dict[str, int]:
    sim = BatchedSim(num_envs, config=config, seed=seed, backend=backend)
    assert sim.backend == backend
    obs = sim.reset().cpu()
    refs = [ReferenceSim(config) for _ in range(num_envs)]
    names = sim.layout.names
    for i, ref in enumerate(refs):
        ref_obs = ref.reset(initial_conditions(config, seed, i, 0))
        _compare_obs(obs[i], ref_obs, names, f"reset env {i}")
    _compare_state(sim, refs, -1)
    gen = torch.Generator().manual_seed(seed)
    counts = dict.fromkeys(("launches", "hits", "kills", "draws", "truncations", "resets"), 0)
    for step in range(steps):
        actions = _random_actions(gen, num_envs, fire_p)
        out = sim.step(actions)
        final_obs, obs = out.final_obs.cpu(), out.obs.cpu()
        for i, ref in enumerate(refs):
            where = f"step {step} env {i}"
            r = ref.step([tuple(int(v) for v in actions[i, side]) for side in range(2)])
            _compare_obs(final_obs[i], r.obs, names, where + " final")
            assert bool(out.terminated[i]) == r.terminated, f"{where} terminated"
            assert bool(out.truncated[i]) == r.truncated, f"{where} truncated"
            assert int(out.winner[i]) == r.winner, f"{where} winner"
            assert int(out.end_reason[i]) == r.end_reason, f"{where} end reason"
            assert out.reward[i].tolist() == r.reward, f"{where} reward"
            assert out.launches[i].tolist() == r.launches, f"{where} launches"
            assert out.hits[i].tolist() == r.hits, f"{where} hits"
            assert int(out.episode_steps[i]) == ref.decision_steps, f"{where} episode steps"
            counts["launches"] += sum(r.launches)
            counts["hits"] += sum(r.hits)
            counts["kills"] += int(r.winner in (0, 1))
            counts["draws"] += int(r.winner == 2 and r.terminated)
            counts["truncations"] += int(r.truncated)
            if r.terminated or r.truncated:
                counts["resets"] += 1
                episode = int(sim.state.episode_index[i])
                ref_obs = ref.reset(initial_conditions(config, seed, i, episode))
                _compare_obs(obs[i], ref_obs, names, where + " after reset")
        _compare_state(sim, refs, step)
    return counts


@pytest.mark.parametrize("backend", BACKENDS)
def test_parity_float64_random_actions_with_launches_hits_and_resets(backend: str) -> None:
    # A short time limit makes truncations and resets happen inside the 200 compared steps.
    config = SimConfig(dtype="float64", max_time_s=25.0, spawn_separation_m=(12_000.0, 25_000.0))
    counts = _run_parity(config, num_envs=24, steps=200, seed=3, fire_p=0.08, backend=backend)
    assert counts["launches"] > 100
    assert counts["hits"] > 5
    assert counts["kills"] > 5
    assert counts["truncations"] > 5
    assert counts["resets"] > 20


@pytest.mark.parametrize("backend", BACKENDS)
def test_parity_float32_default_config(backend: str) -> None:
    counts = _run_parity(SimConfig(), num_envs=12, steps=200, seed=11, fire_p=0.2, backend=backend)
    assert counts["launches"] > 20


@pytest.mark.parametrize("backend", BACKENDS)
def test_parity_time_scale_and_head_on(backend: str) -> None:
    config = SimConfig(dtype="float64", time_scale=2.0, scenario="head_on", max_time_s=60.0)
    counts = _run_parity(config, num_envs=8, steps=60, seed=5, fire_p=0.4, backend=backend)
    assert counts["launches"] > 10


@pytest.mark.parametrize("mode", ["continuous"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_parity_continuous_actions(mode: str, backend: str) -> None:
    config = SimConfig(dtype="float64", action_mode=mode, max_time_s=30.0)
    sim = BatchedSim(6, config=config, seed=2, backend=backend)
    sim.reset()
    refs = [ReferenceSim(config) for _ in range(6)]
    for i, ref in enumerate(refs):
        ref.reset(initial_conditions(config, 2, i, 0))
    gen = torch.Generator().manual_seed(0)
    for step in range(40):
        actions = torch.rand(6, 2, 3, generator=gen, dtype=torch.float64) * 3 - 1.2  # some out of bounds
        out = sim.step(actions)
        for i, ref in enumerate(refs):
            if ref.done:
                continue
            r = ref.step([tuple(float(v) for v in actions[i, side]) for side in range(2)])
            _compare_obs(out.final_obs[i], r.obs, sim.layout.names, f"step {step} env {i}")
            if r.terminated or r.truncated:
                ref.done = True
        assert math.isfinite(float(out.obs.abs().max()))


@pytest.mark.parametrize("backend", BACKENDS)
def test_parity_with_the_reach_block(backend: str) -> None:
    # The reach block (own reach, enemy escape reach, escape time margin) from each sim's own
    # state; close ranges and a short limit give launches, kills and resets on the way.
    config = SimConfig(dtype="float64", obs_reach=True, max_time_s=20.0,
                       spawn_separation_m=(12_000.0, 30_000.0))
    sim = BatchedSim(1, config=config)
    margin = sim.layout.index("reach.escape_margin")
    assert margin == sim.layout.size - 1
    counts = _run_parity(config, num_envs=6, steps=60, seed=7, fire_p=0.1, backend=backend)
    assert counts["launches"] > 5
    assert counts["resets"] > 0
