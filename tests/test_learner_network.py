"""ActorCritic, ActionSpec and running observation normalization."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from learner import ActionSpec, ActorCritic
from learner.normalization import RunningObsNorm
from sim.config import SimConfig


def test_action_spec_for_sim_and_gym():
    spec = ActionSpec.for_sim(SimConfig())
    assert (spec.kind, spec.nvec, spec.dim, spec.num_logits) == ("multi_discrete", (3, 3, 2), 3, 8)
    cont = ActionSpec.for_sim(SimConfig(action_mode="continuous"))
    assert (cont.kind, cont.low, cont.high) == ("continuous", (-1.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    assert ActionSpec.from_gym(gym.spaces.Discrete(2)) == ActionSpec("discrete", nvec=(2,))
    assert ActionSpec.from_gym(gym.spaces.MultiDiscrete([3, 3, 2])).nvec == (3, 3, 2)
    box = ActionSpec.from_gym(gym.spaces.Box(-2.0, 2.0, (4,), np.float32))
    assert box.dim == 4 and box.low == (-2.0,) * 4
    assert ActionSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ValueError, match="kind must be one of"):
        ActionSpec("categorical", nvec=(2,))
    with pytest.raises(ValueError, match="exactly one nvec entry"):
        ActionSpec("discrete", nvec=(2, 3))


@pytest.mark.parametrize("spec", [ActionSpec("discrete", nvec=(4,)), ActionSpec("multi_discrete", nvec=(3, 3, 2)),
                                  ActionSpec("continuous", low=(-1.0, 0.0), high=(1.0, 1.0))])
def test_act_and_evaluate_agree(spec):
    torch.manual_seed(0)
    net = ActorCritic(7, spec, hidden_sizes=(32, 16))
    obs = torch.randn(64, 7)
    actions, log_prob, value = net.act(obs)
    assert actions.shape == (64, spec.dim) and log_prob.shape == (64,) and value.shape == (64,)
    assert actions.dtype == (torch.int64 if spec.is_discrete else torch.float32)
    if spec.is_discrete:
        for i, n in enumerate(spec.nvec):
            assert 0 <= int(actions[:, i].min()) and int(actions[:, i].max()) < n
    lp2, entropy, v2 = net.evaluate(obs, actions)
    torch.testing.assert_close(lp2, log_prob)
    torch.testing.assert_close(v2, value)
    assert lp2.requires_grad and entropy.shape == (64,)
    torch.testing.assert_close(net.get_value(obs), value)


def test_fresh_policy_is_near_uniform_and_samples_match_probabilities():
    spec = ActionSpec("multi_discrete", nvec=(3, 3, 2))
    net = ActorCritic(5, spec, hidden_sizes=(16,))
    obs = torch.randn(1, 5).expand(20000, 5)
    actions, _, _ = net.act(obs)
    # Policy head gain 0.01: every component close to uniform, entropy close to the maximum.
    with torch.no_grad():
        _, entropy, _ = net.evaluate(obs[:1], actions[:1])
    assert abs(entropy.item() - math.log(18)) < 1e-2
    freq = torch.bincount(actions[:, 0], minlength=3).float() / 20000
    assert torch.allclose(freq, torch.full((3,), 1 / 3), atol=0.02)


def test_policy_bias_is_the_fresh_policys_prior():
    spec = ActionSpec("multi_discrete", nvec=(3, 3, 2))
    net = ActorCritic(5, spec, hidden_sizes=(16,))
    net.set_policy_bias([0, 0, 0, 0, 0, 0, 0, -4])
    actions, _, _ = net.act(torch.randn(1, 5).expand(40000, 5))
    fire = actions[:, 2].float().mean().item()
    assert abs(fire - 1 / (1 + math.exp(4))) < 0.005  # about 1.8 %, not one half
    assert abs(actions[:, 0].float().eq(0).float().mean().item() - 1 / 3) < 0.02  # others untouched
    with pytest.raises(ValueError, match="policy_bias needs 8 values"):
        net.set_policy_bias([0.0, -4.0])


def test_teacher_weights_scale_each_components_share_of_the_teachers_log_probability():
    spec = ActionSpec("multi_discrete", nvec=(3, 3, 2))
    net = ActorCritic(5, spec, hidden_sizes=(16,))
    obs = torch.randn(64, 5)
    actions, teacher = (torch.stack([torch.randint(0, n, (64,)) for n in (3, 3, 2)], dim=1) for _ in range(2))
    heads = torch.split(net(obs)[0], [3, 3, 2], dim=-1)
    per_head = [torch.log_softmax(h, -1).gather(-1, teacher[:, i:i + 1]).squeeze(-1) for i, h in enumerate(heads)]
    log_prob, entropy, value, whole = net.evaluate_with_teacher(obs, actions, teacher)
    torch.testing.assert_close(whole, sum(per_head))
    *same, weighted = net.evaluate_with_teacher(obs, actions, teacher, teacher_weights=(1.0, 0.5, 0.0))
    torch.testing.assert_close(weighted, per_head[0] + 0.5 * per_head[1])  # the fire head left out
    for a, b in zip(same, (log_prob, entropy, value), strict=True):
        torch.testing.assert_close(a, b)  # only the teacher's term changes
    fire_logits = net.actor[-1].bias
    weighted.sum().backward()
    assert fire_logits.grad is not None and torch.all(fire_logits.grad[-2:] == 0) and fire_logits.grad[:6].abs().sum() > 0
    with pytest.raises(ValueError, match="teacher_weights needs 3 values"):
        net.evaluate_with_teacher(obs, actions, teacher, teacher_weights=(1.0, 0.0))
    box = ActorCritic(5, ActionSpec("continuous", low=(-1.0, -1.0), high=(1.0, 1.0)), hidden_sizes=(8,))
    target = torch.randn(64, 2)
    *_, full = box.evaluate_with_teacher(obs, target, target)
    *_, first = box.evaluate_with_teacher(obs, target, target, teacher_weights=(1.0, 0.0))
    *_, second = box.evaluate_with_teacher(obs, target, target, teacher_weights=(0.0, 1.0))
    torch.testing.assert_close(first + second, full)


def test_entropy_weights_scale_each_heads_share_of_the_entropy():
    spec = ActionSpec("multi_discrete", nvec=(3, 3, 2))
    net = ActorCritic(5, spec, hidden_sizes=(16,))
    obs, actions = torch.randn(64, 5), torch.stack([torch.randint(0, n, (64,)) for n in (3, 3, 2)], dim=1)
    log_prob, entropy, value = net.evaluate(obs, actions)
    heads = torch.split(net(obs)[0], [3, 3, 2], dim=-1)
    per_head = [torch.distributions.Categorical(logits=h).entropy() for h in heads]
    torch.testing.assert_close(entropy, sum(per_head))
    weighted_log_prob, weighted, weighted_value = net.evaluate(obs, actions, (1.0, 0.5, 0.0))
    torch.testing.assert_close(weighted, per_head[0] + 0.5 * per_head[1])  # the fire head left out
    torch.testing.assert_close(weighted_log_prob, log_prob)  # only the bonus changes
    torch.testing.assert_close(weighted_value, value)
    with pytest.raises(ValueError, match="entropy_weights needs 3 values"):
        net.evaluate(obs, actions, (1.0, 0.0))
    box = ActorCritic(5, ActionSpec("continuous", low=(-1.0, -1.0), high=(1.0, 1.0)), hidden_sizes=(8,))
    _, full, _ = box.evaluate(obs, torch.zeros(64, 2))
    _, half, _ = box.evaluate(obs, torch.zeros(64, 2), (0.5, 0.5))
    torch.testing.assert_close(half, 0.5 * full)
    with torch.no_grad():
        box.log_std.copy_(torch.tensor([-0.5, 0.3]))
    gaussian = torch.distributions.Normal(torch.zeros(2), box.log_std.detach().exp()).entropy()
    _, first, _ = box.evaluate(obs, torch.zeros(64, 2), (1.0, 0.0))  # the second dimension left out
    torch.testing.assert_close(first, gaussian[0].expand(64))
    _, none, _ = box.evaluate(obs, torch.zeros(64, 2), (0.0, 0.0))
    torch.testing.assert_close(none, torch.zeros(64))
    _, second, _ = box.evaluate(obs, torch.zeros(64, 2), (0.0, 2.0))
    second.mean().backward()  # the bonus still trains the weighted dimension's spread
    assert box.log_std.grad is not None and box.log_std.grad.tolist() == pytest.approx([0.0, 2.0])


def test_gumbel_sampling_follows_skewed_logits():
    net = ActorCritic(2, ActionSpec("discrete", nvec=(3,)), hidden_sizes=(8,), normalize_obs=False)
    with torch.no_grad():
        net.actor[-1].weight.zero_()
        net.actor[-1].bias.copy_(torch.tensor([0.0, math.log(3.0), math.log(6.0)]))
    actions, log_prob, _ = net.act(torch.zeros(30000, 2))
    freq = torch.bincount(actions[:, 0], minlength=3).float() / 30000
    assert torch.allclose(freq, torch.tensor([0.1, 0.3, 0.6]), atol=0.015)
    torch.testing.assert_close(log_prob[actions[:, 0] == 2], torch.full_like(log_prob[actions[:, 0] == 2], math.log(0.6)))
    det, _, _ = net.act(torch.zeros(4, 2), deterministic=True)
    assert det[:, 0].tolist() == [2, 2, 2, 2]


def test_gaussian_log_prob_matches_torch_distributions():
    spec = ActionSpec("continuous", low=(-1.0, -1.0, 0.0), high=(1.0, 1.0, 1.0))
    net = ActorCritic(4, spec, hidden_sizes=(8,))
    with torch.no_grad():
        net.log_std.copy_(torch.tensor([-0.5, 0.0, 0.3]))
    obs, actions = torch.randn(10, 4), torch.randn(10, 3)
    lp, ent, _ = net.evaluate(obs, actions)
    mean, _ = net(obs)
    dist = torch.distributions.Normal(mean, net.log_std.exp())
    torch.testing.assert_close(lp, dist.log_prob(actions).sum(-1))
    torch.testing.assert_close(ent, dist.entropy().sum(-1))


def test_orthogonal_init():
    net = ActorCritic(6, ActionSpec("discrete", nvec=(2,)), hidden_sizes=(32, 32))
    w = net.actor[0].weight.detach()  # [32, 6]: columns orthogonal with norm sqrt(2)
    torch.testing.assert_close(w.T @ w, 2.0 * torch.eye(6), atol=1e-5, rtol=1e-5)
    assert net.actor[-1].weight.detach().norm(dim=1).max().item() <= 0.0101
    assert net.critic[0].bias.detach().abs().max().item() == 0.0


def test_running_norm_matches_numpy_and_is_saved():
    rng = np.random.default_rng(0)
    chunks = [rng.normal(3.0, 2.0, size=(n, 4)) for n in (5, 100, 37)]
    norm = RunningObsNorm(4)
    for c in chunks:
        norm.update(torch.tensor(c, dtype=torch.float32))
    everything = np.concatenate(chunks)
    np.testing.assert_allclose(norm.mean.numpy(), everything.mean(0), rtol=1e-5)
    np.testing.assert_allclose(norm.var.numpy(), everything.var(0), rtol=1e-4)
    assert float(norm.count) == len(everything)
    out = norm(torch.tensor(everything, dtype=torch.float32))
    assert abs(float(out.mean())) < 1e-3 and abs(float(out.std()) - 1.0) < 1e-2
    assert float(norm(torch.full((1, 4), 1e6)).max()) == 10.0
    net = ActorCritic(4, ActionSpec("discrete", nvec=(2,)), hidden_sizes=(8,))
    net.update_obs_norm(torch.tensor(everything, dtype=torch.float32))
    state = net.state_dict()
    assert {"obs_norm.mean", "obs_norm.var", "obs_norm.count"} <= set(state)
    other = ActorCritic(4, ActionSpec("discrete", nvec=(2,)), hidden_sizes=(8,))
    other.load_state_dict(state)
    torch.testing.assert_close(other.obs_norm.mean, net.obs_norm.mean)


def test_bad_input_errors():
    net = ActorCritic(5, ActionSpec("multi_discrete", nvec=(3, 3, 2)), hidden_sizes=(8,))
    with pytest.raises(ValueError, match=r"obs must have shape \(B, 5\), got \(4, 3\)"):
        net.act(torch.zeros(4, 3))
    with pytest.raises(ValueError, match=r"actions must have shape \(4, 3\), got \(4, 2\)"):
        net.evaluate(torch.zeros(4, 5), torch.zeros(4, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="obs_dim must be a positive int"):
        ActorCritic(0, ActionSpec("discrete", nvec=(2,)))


def test_rebuild_from_init_kwargs():
    net = ActorCritic(9, ActionSpec("continuous", low=(-1.0,), high=(1.0,)), hidden_sizes=(16, 8),
                      activation="relu")
    clone = ActorCritic.from_init_kwargs(net.init_kwargs())
    clone.load_state_dict(net.state_dict())
    obs = torch.randn(3, 9)
    torch.testing.assert_close(clone(obs)[0], net(obs)[0])
