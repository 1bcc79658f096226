"""``sim.spawn_partial_ammo``: a training curriculum of endgames (fighters starting with fewer
missiles), drawn per environment and episode like the rest of the random scenario, the same in
the batched sim and the scalar reference, and never part of an evaluation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pipeline.evaluation.entrants import trained_sim_config
from sim import BatchedSim
from sim.config import SimConfig
from sim.reference.scalar import ReferenceSim
from sim.scenarios import initial_ammo_batch, initial_conditions

ENVS = 64


def _draws(config: SimConfig, seed: int, episode: int) -> list[tuple[int, int]]:
    out = []
    for env in range(ENVS):
        ic = initial_conditions(config, seed, env, episode)
        full = config.missiles_per_fighter
        out.append((full if ic.red_ammo is None else ic.red_ammo, full if ic.blue_ammo is None else ic.blue_ammo))
    return out


def test_off_by_default_every_fighter_starts_full():
    config = SimConfig()
    sim = BatchedSim(ENVS, config, seed=3)
    sim.reset()
    assert bool((sim.state.f_ammo == config.missiles_per_fighter).all())
    assert all(initial_conditions(config, 3, e, 0).red_ammo is None for e in range(ENVS))


@pytest.mark.parametrize("chance", [0.3, 1.0])
def test_batched_sim_and_scalar_twin_draw_the_same_missiles_at_every_reset(chance):
    config = SimConfig(spawn_partial_ammo=chance)
    sim = BatchedSim(ENVS, config, seed=11)
    sim.reset()
    assert [tuple(int(v) for v in col) for col in sim.state.f_ammo.t()] == _draws(config, 11, 0)
    # A masked reset starts episode 1 in half the environments: their draws are episode 1's,
    # the others keep what they had.
    before = sim.state.f_ammo.clone()
    mask = torch.arange(ENVS) % 2 == 0
    sim.reset(mask)
    second = _draws(config, 11, 1)
    for env in range(ENVS):
        got = tuple(int(v) for v in sim.state.f_ammo[:, env])
        assert got == (second[env] if env % 2 == 0 else tuple(int(v) for v in before[:, env]))


def test_the_chance_and_the_counts_have_the_documented_distribution():
    config = SimConfig(spawn_partial_ammo=0.4)
    ammo = initial_ammo_batch(config, 5, torch.arange(20_000), torch.zeros(20_000, dtype=torch.int64))
    full = config.missiles_per_fighter
    partial = ammo < full
    # Each side on its own: the share started short is the chance, within a few standard errors.
    for side in (0, 1):
        assert abs(partial[:, side].float().mean().item() - 0.4) < 0.02
    # Short starts are uniform over 0 .. full - 1, never full, never negative.
    counts = torch.bincount(ammo[partial], minlength=full)
    assert counts.numel() == full and bool((counts > 0).all())
    assert (counts.float() / counts.sum()).sub(1 / full).abs().max().item() < 0.02
    # Independent sides: both short about chance² of the time.
    assert abs((partial[:, 0] & partial[:, 1]).float().mean().item() - 0.16) < 0.02


def test_the_positions_do_not_move_when_the_curriculum_is_on():
    on = initial_conditions(SimConfig(spawn_partial_ammo=1.0), 2, 7, 4)
    off = initial_conditions(SimConfig(), 2, 7, 4)
    assert dataclasses.replace(on, red_ammo=None, blue_ammo=None) == off


def test_the_reference_starts_with_the_drawn_missiles_and_refuses_impossible_ones():
    config = SimConfig(spawn_partial_ammo=1.0)
    ic = initial_conditions(config, 0, 0, 0)
    ref = ReferenceSim(config)
    ref.reset(ic)
    assert [f.missiles_left for f in ref.fighters] == [ic.red_ammo, ic.blue_ammo]
    with pytest.raises(ValueError, match="initial missiles of side 0 must be 0 to 6"):
        ref.reset(dataclasses.replace(ic, red_ammo=7))


def test_a_fighter_started_without_missiles_cannot_fire():
    config = SimConfig(spawn_partial_ammo=1.0)
    sim = BatchedSim(ENVS, config, seed=1)
    sim.reset()
    empty = sim.state.f_ammo == 0
    assert bool(empty.any())
    fire = torch.zeros(ENVS, 2, 3, dtype=torch.int64)
    fire[..., 2] = 1
    result = sim.step(fire)
    assert bool((result.launches.t()[empty] == 0).all())
    assert bool((result.launches.t()[~empty] == 1).all())


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_a_bad_chance_is_refused(bad):
    with pytest.raises(ValueError, match="spawn_partial_ammo"):
        SimConfig(spawn_partial_ammo=bad)


def test_evaluations_play_the_rules_start_whatever_the_policy_trained_on(tmp_path):
    config = SimConfig(spawn_partial_ammo=0.5)
    assert config.rules_start().spawn_partial_ammo == 0.0
    assert dataclasses.replace(config.rules_start(), spawn_partial_ammo=0.5) == config
    assert trained_sim_config(["crank", "random"]).spawn_partial_ammo == 0.0


def test_the_sims_training_recipe_turns_the_curriculum_on_and_a_setting_wins():
    from pipeline.config import resolve

    assert resolve({}, "cpu").sim.spawn_partial_ammo == 0.3
    assert resolve({"sim": {"spawn_partial_ammo": 0.0}}, "cpu").sim.spawn_partial_ammo == 0.0
    # A resolved config gives itself back, so config.toml trains the same curriculum.
    again = resolve(resolve({}, "cpu").to_dict(), "cpu")
    assert again.sim.spawn_partial_ammo == 0.3


def test_the_graph_safe_masked_reset_draws_what_the_indexed_one_does():
    # sync_free is the accelerator's reset (masked, no host read): run here on the CPU, it must
    # start every episode with the missiles the CPU's indexed reset gives.
    config = SimConfig(spawn_partial_ammo=0.5)
    masked, indexed = BatchedSim(16, config, seed=3, sync_free=True), BatchedSim(16, config, seed=3)
    masked.reset()
    indexed.reset()
    fire_every_7th = torch.zeros(16, 2, 3, dtype=torch.int64)
    for step in range(700):
        fire_every_7th[..., 2] = int(step % 7 == 0)
        masked.step(fire_every_7th)
        indexed.step(fire_every_7th)
        assert torch.equal(masked.state.f_ammo, indexed.state.f_ammo)
    assert int(masked.state.episode_index.min()) >= 2
