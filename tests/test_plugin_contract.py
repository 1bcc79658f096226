"""Plug-in outputs checked where they enter: agents' actions and rewards.

Shape and dtype errors raise at once, naming the plug-in; bad values come back as a 0-dim
device flag, and on the meta device (shapes only: any host read raises) the checks run without
reading anything, for every built-in agent and reward.
"""

from __future__ import annotations

import pytest
import torch

from agents import SCRIPTED, BaseAgent, make_agent
from agents.base import bad_actions_message, check_agent_actions
from learner import ActionSpec, ActorCritic
from rewards import BaseReward, OutcomeReward, WeightedSum, make_reward, step_info
from rewards.base import bad_reward_message, check_reward_output
from sim import BatchedSim, SimConfig

WHO = "opponent 'mypkg.mod:Foo'"
MODES = ("discrete", "continuous")


def _unreadable(flag: torch.Tensor) -> None:
    """The flag is a 0-dim bool on the meta device: nothing was read, and nothing can be."""
    assert flag.device.type == "meta" and flag.dtype == torch.bool and flag.shape == ()
    with pytest.raises((RuntimeError, NotImplementedError)):
        bool(flag)


# ---------------------------------------------------------------------------- agents' actions


@pytest.mark.parametrize(
    "actions, mode, message",
    [
        (torch.zeros(1, 3, dtype=torch.int64), "discrete",
         r"opponent 'mypkg\.mod:Foo' returned actions of shape \(1, 3\), expected \(8, 3\)"),
        (torch.zeros(8, dtype=torch.int64), "discrete", r"shape \(8,\), expected \(8, 3\)"),
        (torch.zeros(8, 2, 3, dtype=torch.int64), "discrete", r"shape \(8, 2, 3\)"),
        (torch.full((8, 3), 1.7), "discrete",
         r"'mypkg\.mod:Foo' returned torch\.float32 actions; discrete actions are int64"),
        (torch.zeros(8, 3, dtype=torch.int32), "discrete", r"torch\.int32 actions; discrete actions are int64"),
        (torch.zeros(8, 3, dtype=torch.int64), "continuous",
         r"torch\.int64 actions; continuous actions are floating point"),
        ([[0, 0, 0]] * 8, "discrete", r"returned list actions, not a torch\.Tensor"),
    ],
)
def test_actions_of_the_wrong_shape_or_dtype_are_refused_naming_the_agent(actions, mode, message):
    with pytest.raises(ValueError, match=message):
        check_agent_actions(actions, 8, mode, WHO)


def test_out_of_range_discrete_indices_raise_the_flag_per_component():
    ok = torch.tensor([[0, 0, 0], [2, 2, 1]], dtype=torch.int64)
    assert not bool(check_agent_actions(ok, 2, "discrete", WHO))
    # One past the last index of each component (rudder 3, throttle 3, fire 2), and -1.
    for column, limit in enumerate((3, 3, 2)):
        for value in (limit, -1):
            bad = ok.clone()
            bad[1, column] = value
            assert bool(check_agent_actions(bad, 2, "discrete", WHO)), (column, value)
    assert "fire in 0..1" in bad_actions_message(WHO, "discrete")


def test_non_finite_continuous_actions_raise_the_flag_and_finite_ones_do_not():
    finite = torch.tensor([[0.3, 0.5, 0.0], [-4.0, 9.0, 2.0]])  # outside the bounds: clipped
    assert not bool(check_agent_actions(finite, 2, "continuous", WHO))
    for value in (float("nan"), float("inf"), float("-inf")):
        bad = finite.clone()
        bad[0, 1] = value
        assert bool(check_agent_actions(bad, 2, "continuous", WHO)), value
    assert bad_actions_message(WHO, "continuous").startswith(f"{WHO} returned non-finite")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(SCRIPTED))
def test_every_scripted_agent_meets_the_contract_on_cpu_and_reads_nothing_on_meta(name, mode):
    cfg = SimConfig(action_mode=mode)
    sim = BatchedSim(16, cfg, seed=3)
    obs = sim.reset()[:, 1].clone()
    agent = make_agent(name, 16, sim.layout, action_mode=mode, sim_config=cfg)
    assert not bool(check_agent_actions(agent.act(obs), 16, mode, name))
    meta = make_agent(name, 16, sim.layout, "meta", action_mode=mode, sim_config=cfg)
    _unreadable(check_agent_actions(meta.act(obs.to("meta")), 16, mode, name))


@pytest.mark.parametrize("mode", MODES)
def test_policy_agent_samples_meet_the_contract(mode):
    """A checkpoint opponent's network samples continuous actions beyond the bounds (the sim
    clips them): valid. Its discrete samples are int64 indices in range."""
    from agents import PolicyAgent

    cfg = SimConfig(action_mode=mode)
    sim = BatchedSim(64, cfg, seed=1)
    net = ActorCritic(sim.obs_dim, ActionSpec.for_sim(cfg), hidden_sizes=(8,))
    with torch.no_grad():
        if mode == "continuous":
            net.log_std.fill_(1.0)  # wide samples: some land outside [-1, 1]
    actions = PolicyAgent(net, 64).act(sim.reset()[:, 1])
    if mode == "continuous":
        assert bool((actions.abs() > 1).any())
    assert not bool(check_agent_actions(actions, 64, mode, "policy"))


class _Broadcast(BaseAgent):
    """One row for every environment: the shape bug the check exists for."""

    def act(self, obs):
        return torch.ones(1, 3, dtype=torch.int64)


def test_a_one_row_agent_is_caught_not_broadcast():
    agent = _Broadcast(8)
    out = agent.act(torch.zeros(8, 4))
    torch.zeros(8, 3, dtype=torch.int64).copy_(out)  # what used to happen: silently broadcast
    with pytest.raises(ValueError, match=r"opponent _Broadcast returned actions of shape \(1, 3\)"):
        check_agent_actions(out, 8, "discrete", "opponent _Broadcast")


# ---------------------------------------------------------------------------- rewards


def _step(n: int = 4, device: str = "cpu"):
    sim = BatchedSim(n, SimConfig(max_time_s=1.0), seed=2)
    obs = sim.reset().clone()
    actions = torch.ones(n, 2, 3, dtype=torch.int64)
    out = sim.step(actions)
    args = (obs[:, 0], out.final_obs[:, 0], actions[:, 0], out.done.clone(),
            {k: v.clone() for k, v in step_info(out, 0).items()})
    if device == "cpu":
        return args
    *tensors, info = args
    return (*(t.to(device) for t in tensors), {k: v.to(device) for k, v in info.items()})


@pytest.mark.parametrize(
    "reward, message",
    [
        (torch.tensor(0.5), r"reward 'mypkg:R' returned a reward of shape \(\), expected \(4,\)"),
        (torch.zeros(1), r"shape \(1,\), expected \(4,\)"),
        (torch.zeros(4, 1), r"shape \(4, 1\), expected \(4,\)"),
        (torch.zeros(4, dtype=torch.int64), r"'mypkg:R' returned a torch\.int64 reward; rewards are floating point"),
        (torch.zeros(4, dtype=torch.bool), r"torch\.bool reward"),
        (0.5, r"'mypkg:R' returned float, not a torch\.Tensor"),
    ],
)
def test_rewards_of_the_wrong_shape_or_dtype_are_refused_naming_the_reward(reward, message):
    with pytest.raises(ValueError, match=message):
        check_reward_output(reward, 4, "reward 'mypkg:R'")


def test_non_finite_rewards_raise_the_flag():
    ok = torch.tensor([0.0, -1.0, 1e30, 1.0])
    assert not bool(check_reward_output(ok, 4, "r"))
    assert not bool(check_reward_output(ok.double(), 4, "r"))
    for value in (float("nan"), float("inf"), float("-inf")):
        bad = ok.clone()
        bad[2] = value
        assert bool(check_reward_output(bad, 4, "r")), value
    assert bad_reward_message("reward R") == "reward R returned non-finite rewards (NaN or infinity)"


@pytest.mark.parametrize("spec", ["zero", "outcome", "shaped", "outcome+0.5*shaped", "-1*zero"])
def test_every_preset_and_sum_meets_the_contract_on_cpu_and_reads_nothing_on_meta(spec):
    args = _step()
    assert not bool(check_reward_output(make_reward(spec).compute(*args), 4, spec))
    meta = make_reward(spec, "meta").compute(*_step(device="meta"))
    _unreadable(check_reward_output(meta, 4, spec))


class _Scalar(BaseReward):
    """A reward term that forgot the batch: one number for every environment."""

    def compute(self, obs_before, obs_after, action, done, info):
        return torch.tensor(1.0)


class _Nan(BaseReward):
    def compute(self, obs_before, obs_after, action, done, info):
        return torch.full((obs_before.shape[0],), float("nan"))


def test_weighted_sum_names_a_term_of_the_wrong_shape_instead_of_broadcasting_it():
    total = WeightedSum([(1.0, OutcomeReward()), (0.5, _Scalar())])
    with pytest.raises(ValueError, match=r"reward term 1 \(_Scalar\) returned a reward of shape \(\)"):
        total.compute(*_step())


def test_weighted_sum_of_a_non_finite_term_is_flagged_even_with_weight_zero():
    total = WeightedSum([(1.0, OutcomeReward()), (0.0, _Nan())])
    assert bool(check_reward_output(total.compute(*_step()), 4, "sum"))


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), -float("inf")])
def test_weighted_sum_refuses_non_finite_weights(weight):
    with pytest.raises(ValueError, match=r"term 1 weight must be finite"):
        WeightedSum([(1.0, OutcomeReward()), (weight, OutcomeReward())])
