"""pipeline.config.specs: checkpoints become policy agents, every other spec goes to the agents
registry, and rewards come from the rewards registry."""

from __future__ import annotations

import re

import pytest
import torch
from ckpt_damage import DAMAGE

from agents import CrankAgent, PolicyAgent, RandomAgent
from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import CheckpointError, save_checkpoint
from pipeline.config.specs import build_agent, make_reward
from rewards import OutcomeReward, WeightedSum
from sim import SimConfig
from sim.layout import ObsLayout

LAYOUT = ObsLayout.from_config(SimConfig())


def _saved_learner(directory, layout: ObsLayout = LAYOUT, sim_config: SimConfig | None = None) -> PPOLearner:
    torch.manual_seed(0)
    learner = PPOLearner(PPOConfig(hidden_sizes=(16,)), layout.size, ActionSpec.for_sim(sim_config or SimConfig()),
                         obs_layout=layout.metadata())
    save_checkpoint(directory, learner)
    return learner


def test_policy_agent_from_a_checkpoint_folder_or_file(tmp_path):
    learner = _saved_learner(tmp_path)
    obs = torch.rand(4, LAYOUT.size)
    for spec in (str(tmp_path), str(tmp_path / "latest.pt"), f"  {tmp_path}  "):
        agent = build_agent(spec, 4, LAYOUT, deterministic=True)
        assert isinstance(agent, PolicyAgent) and agent.num_envs == 4
        assert torch.equal(agent.act(obs), learner.policy.act(obs, deterministic=True)[0])


def test_a_checkpoint_must_exist_and_match_the_layout(tmp_path):
    with pytest.raises(CheckpointError, match=r"^no checkpoint in \S+ \(looked for \S+/latest\.pt and "
                                              r"\S+/checkpoints/latest\.pt\)$"):
        build_agent(str(tmp_path), 1, LAYOUT)
    with pytest.raises(ValueError, match=r"^no checkpoint at /nonexistent/policy\.pth \(no such file or directory\)$"):
        build_agent("/nonexistent/policy.pth", 1, LAYOUT)
    # A path that names no file is a missing checkpoint, not an unknown agent name.
    with pytest.raises(ValueError, match=r"^no checkpoint at runs/none \(no such file or directory\)$"):
        build_agent("runs/none", 1, LAYOUT)
    _saved_learner(tmp_path)
    with pytest.raises(ValueError, match="another observation layout"):
        build_agent(str(tmp_path / "latest.pt"), 4, ObsLayout(2, 2))


def test_a_run_directory_is_its_latest_checkpoint(tmp_path):
    learner = _saved_learner(tmp_path / "run" / "checkpoints")
    agent = build_agent(str(tmp_path / "run"), 2, LAYOUT, deterministic=True)
    obs = torch.rand(2, LAYOUT.size)
    assert torch.equal(agent.act(obs), learner.policy.act(obs, deterministic=True)[0])


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_checkpoint_is_one_line_naming_it(kind, tmp_path):
    _saved_learner(tmp_path / "good")
    damage, message = DAMAGE[kind]
    bad = damage(tmp_path / "good" / "latest.pt", tmp_path)
    with pytest.raises(CheckpointError) as caught:
        build_agent(str(bad), 2, LAYOUT, sim_config=SimConfig())
    assert re.fullmatch(message, str(caught.value)) and str(bad) in str(caught.value)
    assert isinstance(caught.value, ValueError)  # pipeline.run.parts turns it into a ConfigError


def test_a_checkpoint_of_the_other_action_mode_is_refused_at_load_time(tmp_path):
    continuous = SimConfig(action_mode="continuous")
    _saved_learner(tmp_path / "cont", sim_config=continuous)
    _saved_learner(tmp_path / "disc")
    with pytest.raises(ValueError, match=r"^checkpoint \S+cont/latest\.pt acts in action_mode 'continuous', "
                                         r"the simulator's action_mode is 'discrete'$"):
        build_agent(str(tmp_path / "cont"), 2, LAYOUT, action_mode="discrete", sim_config=SimConfig())
    with pytest.raises(ValueError, match=r"acts in action_mode 'continuous', the simulator's action_mode is 'discrete'"):
        build_agent(str(tmp_path / "cont"), 2, LAYOUT)  # no sim_config: action_mode decides
    with pytest.raises(ValueError, match=r"^checkpoint \S+disc/latest\.pt acts in action_mode 'discrete', "
                                         r"the simulator's action_mode is 'continuous'$"):
        build_agent(str(tmp_path / "disc"), 2, LAYOUT, action_mode="continuous", sim_config=continuous)
    agent = build_agent(str(tmp_path / "cont"), 2, LAYOUT, action_mode="continuous", sim_config=continuous)
    assert agent.act(torch.rand(2, LAYOUT.size)).dtype == torch.float32


def test_other_specs_go_to_the_agents_registry():
    assert type(build_agent("crank", 3, LAYOUT, sim_config=SimConfig())) is CrankAgent
    assert type(build_agent(" random ", 3, LAYOUT, seed=4)) is RandomAgent
    assert type(build_agent("agents.base:RandomAgent", 2, LAYOUT)).__name__ == "RandomAgent"
    with pytest.raises(ValueError, match="unknown agent 'kamikaze'"):
        build_agent("kamikaze", 1, LAYOUT)
    with pytest.raises(ValueError, match="non-empty string"):
        build_agent("  ", 1, LAYOUT)


def test_a_folder_named_like_a_scripted_agent_is_still_the_scripted_agent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "crank").mkdir()
    assert type(build_agent("crank", 2, LAYOUT)) is CrankAgent


def test_make_reward_is_the_rewards_registry():
    assert isinstance(make_reward("outcome"), OutcomeReward)
    assert isinstance(make_reward("outcome+0.1*shaped", layout=LAYOUT), WeightedSum)
