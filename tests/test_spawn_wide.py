"""``sim.spawn_wide``: a training curriculum of starts anywhere in the arena (near an edge too),
drawn per environment and episode like the rest of the random scenario, the same in the batched
sim and the scalar twin, leaving every other start as it was, and never part of an evaluation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pipeline.evaluation.entrants import trained_sim_config
from sim import BatchedSim
from sim.config import SPAWN_WIDE_MARGIN_M, SimConfig
from sim.scenarios import initial_conditions, initial_conditions_batch

ENVS = 2_000


def _starts(config: SimConfig, seed: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Positions, headings and speeds of episode 0 in ENVS environments."""
    return initial_conditions_batch(config, seed, torch.arange(ENVS), torch.zeros(ENVS, dtype=torch.int64))


def _centres(config: SimConfig, seed: int = 3) -> torch.Tensor:
    return _starts(config, seed)[0].mean(dim=1)  # [ENVS, 2]


def test_off_by_default_and_every_start_inside_the_rules_shift():
    config = SimConfig()
    assert config.spawn_wide == 0.0
    assert float(_centres(config).abs().max()) <= config.spawn_shift_m


def test_the_chosen_share_of_starts_is_wider_and_the_others_do_not_move():
    off, on = SimConfig(), SimConfig(spawn_wide=0.4)
    moved = (_centres(on) != _centres(off)).any(dim=1)
    # The share moved is the chance, within a few standard errors (1.1 % at 2000 starts).
    assert abs(moved.float().mean().item() - 0.4) < 0.04
    pos_on, heading_on, speed_on = _starts(on)
    pos_off, heading_off, speed_off = _starts(off)
    # Only the centre moves: headings, speeds and the picture's shape are the same.
    assert torch.equal(heading_on, heading_off) and torch.equal(speed_on, speed_off)
    assert torch.allclose(pos_on[:, 1] - pos_on[:, 0], pos_off[:, 1] - pos_off[:, 0])
    wide = _centres(on)[moved].abs()
    assert float(wide.max()) > on.spawn_shift_m  # some wide starts reach past the rules' shift
    assert float(wide.max()) <= on.wide_shift_m


def test_both_fighters_start_inside_the_arena_with_the_margin_at_the_widest():
    config = SimConfig(spawn_wide=1.0)
    pos = _starts(config, seed=9)[0]
    assert float(pos.abs().max()) <= config.arena_half_width_m - SPAWN_WIDE_MARGIN_M
    # Some fight starts within 15 km of an edge (the rules' start keeps 32.5 km at least).
    assert float(pos.abs().amax(dim=(1, 2)).max()) > config.arena_half_width_m - 15_000


def test_the_batched_draw_and_the_scalar_twin_agree():
    config = SimConfig(spawn_wide=0.5)
    pos, heading, _ = initial_conditions_batch(config, 5, torch.arange(64), torch.full((64,), 2, dtype=torch.int64))
    for env in range(64):
        ic = initial_conditions(config, 5, env, 2)
        assert pos[env, 0].tolist() == pytest.approx(list(ic.red_pos), abs=1e-6)
        assert pos[env, 1].tolist() == pytest.approx(list(ic.blue_pos), abs=1e-6)
        assert heading[env].tolist() == pytest.approx([ic.red_heading_rad, ic.blue_heading_rad])


def test_the_sim_starts_its_fighters_where_the_draw_says_and_the_masked_reset_agrees():
    config = SimConfig(spawn_wide=0.5)
    sim = BatchedSim(16, config, seed=7)
    sim.reset()
    ic = initial_conditions(config, 7, 3, 0)
    assert [float(sim.state.f_px[0, 3]), float(sim.state.f_py[0, 3])] == pytest.approx(list(ic.red_pos), abs=0.01)
    masked, indexed = BatchedSim(16, config, seed=3, sync_free=True), BatchedSim(16, config, seed=3)
    masked.reset()
    indexed.reset()
    straight = torch.ones(16, 2, 3, dtype=torch.int64)
    straight[..., 2] = 0
    for _ in range(650):  # past the 600-decision time limit: every environment restarted
        masked.step(straight)
        indexed.step(straight)
        assert torch.equal(masked.state.f_px, indexed.state.f_px)
    assert int(masked.state.episode_index.min()) >= 1


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_a_bad_chance_is_refused(bad):
    with pytest.raises(ValueError, match="spawn_wide"):
        SimConfig(spawn_wide=bad)


def test_a_wide_start_with_no_room_beyond_the_rules_shift_is_refused():
    with pytest.raises(ValueError, match=r"spawn_wide=0\.5 needs room beyond spawn_shift_m"):
        SimConfig(spawn_wide=0.5, spawn_shift_m=50_000.0)


def test_evaluations_play_the_rules_start_whatever_the_policy_trained_on():
    config = SimConfig(spawn_wide=0.3, spawn_partial_ammo=0.3)
    assert config.rules_start().spawn_wide == 0.0
    assert dataclasses.replace(config.rules_start(), spawn_wide=0.3, spawn_partial_ammo=0.3) == config
    assert trained_sim_config(["crank", "random"]).spawn_wide == 0.0
