"""GAE and V-trace against plain-Python references on random data with mixed episode ends."""

from __future__ import annotations

import math

import pytest
import torch

from learner.advantages import compute_gae, compute_vtrace


def _random_data(t: int = 17, b: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(t, b, generator=g)
    values = torch.randn(t, b, generator=g)
    boot = torch.randn(t, b, generator=g)
    next_values = torch.randn(b, generator=g)
    u = torch.rand(t, b, generator=g)
    terminated = u < 0.12
    truncated = (u >= 0.12) & (u < 0.24)
    # A few steps both terminated and truncated: termination must win.
    both = torch.rand(t, b, generator=g) < 0.03
    terminated |= both
    truncated |= both
    return rewards, values, terminated, truncated, boot, next_values


def _gae_reference(rewards, values, terminated, truncated, boot, next_values, gamma, lam):
    t_len, b_len = rewards.shape
    adv = [[0.0] * b_len for _ in range(t_len)]
    for b in range(b_len):
        running = 0.0
        for t in reversed(range(t_len)):
            if terminated[t, b]:
                next_v, cont = 0.0, 0.0
            elif truncated[t, b]:
                next_v, cont = float(boot[t, b]), 0.0
            else:
                next_v = float(values[t + 1, b]) if t + 1 < t_len else float(next_values[b])
                cont = 1.0
            delta = float(rewards[t, b]) + gamma * next_v - float(values[t, b])
            running = delta + gamma * lam * cont * running
            adv[t][b] = running
    return torch.tensor(adv)


def _vtrace_reference(log_rhos, rewards, values, terminated, truncated, boot, next_values, gamma, lam,
                      rho_clip, c_clip):
    t_len, b_len = rewards.shape
    vs = [[0.0] * b_len for _ in range(t_len)]
    pg = [[0.0] * b_len for _ in range(t_len)]
    for b in range(b_len):
        vs_next, v_next_in_episode = float(next_values[b]), float(next_values[b])
        for t in reversed(range(t_len)):
            ratio = math.exp(float(log_rhos[t, b]))
            rho, c = min(rho_clip, ratio), lam * min(c_clip, ratio)
            v = float(values[t, b])
            if terminated[t, b]:
                after_v = after_vs = 0.0
                cont = False
            elif truncated[t, b]:
                after_v = after_vs = float(boot[t, b])
                cont = False
            else:
                after_v, after_vs, cont = v_next_in_episode, vs_next, True
            delta = rho * (float(rewards[t, b]) + gamma * after_v - v)
            correction = gamma * c * (after_vs - after_v) if cont else 0.0
            vs[t][b] = v + delta + correction
            pg[t][b] = rho * (float(rewards[t, b]) + gamma * after_vs - v)
            vs_next, v_next_in_episode = vs[t][b], v
    return torch.tensor(vs), torch.tensor(pg)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_matches_python_reference(seed):
    data = _random_data(seed=seed)
    adv, ret = compute_gae(*data, gamma=0.97, lam=0.9)
    expected = _gae_reference(*data, 0.97, 0.9)
    torch.testing.assert_close(adv, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, expected + data[1], rtol=1e-5, atol=1e-5)


def test_gae_bootstraps_on_truncation_only():
    rewards = torch.zeros(1, 2)
    values = torch.zeros(1, 2)
    boot = torch.full((1, 2), 10.0)
    terminated = torch.tensor([[True, False]])
    truncated = torch.tensor([[False, True]])
    adv, _ = compute_gae(rewards, values, terminated, truncated, boot, torch.full((2,), 99.0), 0.5, 1.0)
    assert adv.tolist() == [[0.0, 5.0]]


def test_gae_writes_into_out_buffer():
    data = _random_data()
    out = torch.empty_like(data[1])
    adv, _ = compute_gae(*data, gamma=0.99, lam=0.95, out=out)
    assert adv.data_ptr() == out.data_ptr()


@pytest.mark.parametrize("seed", [0, 3])
def test_vtrace_matches_python_reference(seed):
    data = _random_data(seed=seed)
    log_rhos = torch.randn(data[0].shape, generator=torch.Generator().manual_seed(seed + 10)) * 0.5
    vs, pg = compute_vtrace(log_rhos, *data, gamma=0.95, lam=0.9, rho_clip=1.0, c_clip=0.8)
    ref_vs, ref_pg = _vtrace_reference(log_rhos, *data, 0.95, 0.9, 1.0, 0.8)
    torch.testing.assert_close(vs, ref_vs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pg, ref_pg, rtol=1e-5, atol=1e-5)


def test_vtrace_on_policy_equals_gae_returns():
    data = _random_data(seed=5)
    vs, pg = compute_vtrace(torch.zeros_like(data[0]), *data, gamma=0.99, lam=0.95)
    adv, ret = compute_gae(*data, gamma=0.99, lam=0.95)
    torch.testing.assert_close(vs, ret, rtol=1e-5, atol=1e-5)
    # On-policy, the policy-gradient advantage is the TD error against the next V-trace target.
    assert not torch.allclose(pg, adv)
    torch.testing.assert_close(pg[-1, ~(data[2][-1] | data[3][-1])],
                               (data[0][-1] + 0.99 * data[5] - data[1][-1])[~(data[2][-1] | data[3][-1])])


def test_bad_shapes_are_named():
    data = list(_random_data())
    data[4] = data[4][:, :3]
    with pytest.raises(ValueError, match="bootstrap_values must have shape"):
        compute_gae(*data, gamma=0.99, lam=0.95)
    data = list(_random_data())
    data[2] = data[2].float()
    with pytest.raises(ValueError, match="terminated and truncated must be bool"):
        compute_gae(*data, gamma=0.99, lam=0.95)
