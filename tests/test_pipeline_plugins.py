"""pipeline.plugins: checkpoints become policy agents, every other spec goes to the agents
registry, and rewards come from the rewards registry."""

from __future__ import annotations

import pytest
import torch

from agents import CrankAgent, PolicyAgent, RandomAgent
from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import save_checkpoint
from pipeline.plugins import make_agent, make_reward
from rewards import OutcomeReward, WeightedSum
from sim import SimConfig
from sim.layout import ObsLayout

LAYOUT = ObsLayout.from_config(SimConfig())


def _saved_learner(directory, layout: ObsLayout = LAYOUT) -> PPOLearner:
    torch.manual_seed(0)
    learner = PPOLearner(PPOConfig(hidden_sizes=(16,)), layout.size, ActionSpec.for_sim(SimConfig()),
                         obs_layout=layout.metadata())
    save_checkpoint(directory, learner)
    return learner


def test_policy_agent_from_a_checkpoint_folder_or_file(tmp_path):
    learner = _saved_learner(tmp_path)
    obs = torch.rand(4, LAYOUT.size)
    for spec in (str(tmp_path), str(tmp_path / "latest.pt"), f"  {tmp_path}  "):
        agent = make_agent(spec, 4, LAYOUT, deterministic=True)
        assert isinstance(agent, PolicyAgent) and agent.num_envs == 4
        assert torch.equal(agent.act(obs), learner.policy.act(obs, deterministic=True)[0])


def test_a_checkpoint_must_exist_and_match_the_layout(tmp_path):
    with pytest.raises(ValueError, match=r"checkpoint '.*latest\.pt' does not exist"):
        make_agent(str(tmp_path), 1, LAYOUT)
    with pytest.raises(ValueError, match=r"checkpoint '/nonexistent/policy\.pth' does not exist"):
        make_agent("/nonexistent/policy.pth", 1, LAYOUT)
    _saved_learner(tmp_path)
    with pytest.raises(ValueError, match="another observation layout"):
        make_agent(str(tmp_path / "latest.pt"), 4, ObsLayout(2, 2))


def test_other_specs_go_to_the_agents_registry():
    assert type(make_agent("crank", 3, LAYOUT, sim_config=SimConfig())) is CrankAgent
    assert type(make_agent(" random ", 3, LAYOUT, seed=4)) is RandomAgent
    assert type(make_agent("agents.base:RandomAgent", 2, LAYOUT)).__name__ == "RandomAgent"
    with pytest.raises(ValueError, match="unknown agent 'kamikaze'"):
        make_agent("kamikaze", 1, LAYOUT)
    with pytest.raises(ValueError, match="non-empty string"):
        make_agent("  ", 1, LAYOUT)


def test_a_folder_named_like_a_scripted_agent_is_still_the_scripted_agent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "crank").mkdir()
    assert type(make_agent("crank", 2, LAYOUT)) is CrankAgent


def test_make_reward_is_the_rewards_registry():
    assert isinstance(make_reward("outcome"), OutcomeReward)
    assert isinstance(make_reward("outcome+0.1*shaped", layout=LAYOUT), WeightedSum)
