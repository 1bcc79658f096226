"""The PPO update: statistics, behaviour-policy correction, schedule, validation, reuse."""

from __future__ import annotations

import math

import pytest
import torch

from learner import ActionSpec, PPOConfig, PPOLearner, RolloutBatch


def random_batch(learner: PPOLearner, t: int = 16, b: int = 8, seed: int = 0, version: int = 0) -> RolloutBatch:
    """A batch whose actions, log-probs and values come from ``learner``'s current policy on
    random observations, with random rewards and a few episode ends."""
    g = torch.Generator().manual_seed(seed)
    d = learner.policy.obs_dim
    obs = torch.randn(t, b, d, generator=g) * 2.0 + 1.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        actions, log_probs, values = learner.policy.act(obs.reshape(t * b, d))
    u = torch.rand(t, b, generator=g)
    return RolloutBatch(
        obs=obs, actions=actions.reshape(t, b, -1), log_probs=log_probs.reshape(t, b),
        values=values.reshape(t, b), rewards=torch.randn(t, b, generator=g),
        terminated=u < 0.05, truncated=(u >= 0.05) & (u < 0.08),
        bootstrap_values=torch.randn(t, b, generator=g), next_values=torch.randn(b, generator=g),
        policy_versions=torch.full((b,), version, dtype=torch.int64),
    )


def small_learner(**overrides) -> PPOLearner:
    """A small multi-discrete learner (the sim's action space) on 12-dim observations."""
    cfg = PPOConfig(hidden_sizes=(32, 32), num_minibatches=4, update_epochs=2, total_updates=10).replace(**overrides)
    return PPOLearner(cfg, 12, ActionSpec("multi_discrete", nvec=(3, 3, 2)))

EXPECTED_KEYS = {"loss_policy", "loss_value", "entropy", "approx_kl", "clip_fraction", "explained_variance",
                 "grad_norm", "learning_rate", "epochs", "policy_lag_mean", "policy_lag_max", "samples",
                 "policy_version"}


def test_update_reports_statistics_and_changes_parameters():
    learner = small_learner()
    before = [p.detach().clone() for p in learner.policy.parameters()]
    stats = learner.update(random_batch(learner))
    assert EXPECTED_KEYS <= set(stats)
    assert all(math.isfinite(v) for k, v in stats.items() if k != "explained_variance")
    assert stats["samples"] == 128 and stats["epochs"] == 2 and learner.policy_version == 1
    assert stats["grad_norm"] > 0 and stats["entropy"] > 0
    assert any(not torch.equal(a, p) for a, p in zip(before, learner.policy.parameters(), strict=True))
    # Observation statistics were merged from the batch.
    assert float(learner.policy.obs_norm.count) == 128


def test_ratio_uses_behaviour_log_probs():
    learner = small_learner(num_minibatches=1, update_epochs=1)
    batch = random_batch(learner)
    stats = learner.update(batch)
    # Data from the current policy: the first (only) step starts at ratio 1 (up to obs-norm drift).
    assert stats["clip_fraction"] < 0.05 and abs(stats["approx_kl"]) < 1e-3

    stale = small_learner(num_minibatches=1, update_epochs=1, update_obs_norm=False)
    batch = random_batch(stale)
    batch.log_probs -= 0.5  # an older policy gave these actions e^-0.5 of today's probability
    stats = stale.update(batch)
    assert stats["clip_fraction"] == 1.0
    assert stats["approx_kl"] == pytest.approx(math.exp(0.5) - 1 - 0.5, rel=1e-3)


def test_policy_lag_is_reported():
    learner = small_learner()
    for i in range(3):
        learner.update(random_batch(learner, seed=i, version=learner.policy_version))
    batch = random_batch(learner, seed=9, version=1)
    batch.policy_versions[:4] = 3
    stats = learner.update(batch)
    assert stats["policy_lag_max"] == 2.0 and stats["policy_lag_mean"] == 1.0


def test_learning_rate_anneals_linearly():
    learner = small_learner(learning_rate=1e-3, total_updates=4)
    rates = [learner.update(random_batch(learner, seed=i))["learning_rate"] for i in range(5)]
    assert rates == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0])
    flat = small_learner(learning_rate=1e-3, anneal_lr=False)
    assert flat.update(random_batch(flat))["learning_rate"] == 1e-3


def test_target_kl_stops_epochs_early():
    learner = small_learner(update_epochs=8, target_kl=1e-9, learning_rate=1e-2)
    assert learner.update(random_batch(learner))["epochs"] == 1.0


def test_vtrace_update_runs_and_differs_from_gae():
    a = small_learner(use_vtrace=True)
    b = small_learner(use_vtrace=False)
    batch = random_batch(a)
    batch.log_probs -= 0.3
    sa, sb = a.update(batch), b.update(batch)
    assert math.isfinite(sa["loss_value"]) and sa["return_mean"] != sb["return_mean"]


@pytest.mark.parametrize("use_vtrace", [False, True])
def test_truncation_bootstraps_unless_turned_off(use_vtrace):
    """With ``bootstrap_truncated`` off, a truncated step's returns are those of a terminated
    step: the bootstrap values stop mattering, and nothing else changes."""
    def returns(bootstrap_truncated: bool, scale: float) -> torch.Tensor:
        learner = small_learner(use_vtrace=use_vtrace, bootstrap_truncated=bootstrap_truncated)
        batch = random_batch(learner)
        batch.bootstrap_values *= scale
        ws = learner._get_workspace(batch)
        learner._targets(batch, ws)
        return ws.returns.clone()

    batch = random_batch(small_learner())
    assert batch.truncated.any()
    assert not torch.allclose(returns(True, 1.0), returns(True, 10.0))
    assert torch.equal(returns(False, 1.0), returns(False, 10.0))
    terminated = small_learner(use_vtrace=use_vtrace)
    b2 = random_batch(terminated)
    b2.terminated |= b2.truncated
    ws = terminated._get_workspace(b2)
    terminated._targets(b2, ws)
    assert torch.allclose(returns(False, 1.0), ws.returns)


def test_continuous_and_discrete_kinds_update():
    cont = PPOLearner(PPOConfig(hidden_sizes=(16,), num_minibatches=2, update_epochs=1), 12,
                      ActionSpec("continuous", low=(-1.0, 0.0, 0.0), high=(1.0, 1.0, 1.0)))
    stats = cont.update(random_batch(cont))
    assert math.isfinite(stats["loss_policy"]) and cont.policy.log_std.grad is not None
    disc = PPOLearner(PPOConfig(hidden_sizes=(16,), num_minibatches=2, update_epochs=1), 12,
                      ActionSpec("discrete", nvec=(5,)))
    assert math.isfinite(disc.update(random_batch(disc))["loss_policy"])


def test_working_tensors_are_reused_once_warm():
    learner = small_learner()
    learner.update(random_batch(learner, seed=0))
    ws = learner._workspace
    ptrs = [getattr(ws, name).data_ptr() for name in ws.__dataclass_fields__]
    grads = [p.grad.data_ptr() for p in learner.policy.parameters()]
    opt_state = [t.data_ptr() for s in learner.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    for i in range(1, 4):
        learner.update(random_batch(learner, seed=i))
    assert learner._workspace is ws
    assert ptrs == [getattr(ws, name).data_ptr() for name in ws.__dataclass_fields__]
    assert grads == [p.grad.data_ptr() for p in learner.policy.parameters()]
    assert opt_state == [t.data_ptr() for s in learner.optimizer.state.values() for t in s.values()
                         if torch.is_tensor(t)]


def test_bad_batches_are_refused_with_the_field_named():
    learner = small_learner()
    batch = random_batch(learner)
    batch.rewards = batch.rewards[:, :3]
    with pytest.raises(ValueError, match=r"rewards must have shape \(T, B\) = \(16, 8\), got \(16, 3\)"):
        learner.update(batch)
    batch = random_batch(learner)
    batch.obs = batch.obs[..., :5]
    with pytest.raises(ValueError, match=r"obs must have shape \(T, B, obs_dim\) = \(16, 8, 12\)"):
        learner.update(batch)
    batch = random_batch(learner)
    batch.terminated = batch.terminated.float()
    with pytest.raises(ValueError, match="terminated must be bool"):
        learner.update(batch)
    batch = random_batch(learner, t=5, b=3)
    with pytest.raises(ValueError, match="must be divisible by num_minibatches = 4"):
        learner.update(batch)
    batch = random_batch(learner)
    batch.actions = batch.actions.float()
    with pytest.raises(ValueError, match="actions must be int64"):
        learner.update(batch)
    assert learner.policy_version == 0


def test_config_validation():
    with pytest.raises(ValueError, match="gamma must be in"):
        PPOConfig(gamma=1.5)
    with pytest.raises(ValueError, match=r"num_minibatches must be an integer in \[1, "):
        PPOConfig(num_minibatches=0)
    with pytest.raises(ValueError, match="hidden_sizes must be"):
        PPOConfig(hidden_sizes=())
    with pytest.raises(ValueError, match="unknown PPO config field"):
        PPOConfig.from_dict({"learnin_rate": 1.0})
    assert PPOConfig.from_dict(PPOConfig().to_dict()) == PPOConfig()


def test_same_seed_same_result():
    a, b = small_learner(seed=3), small_learner(seed=3)
    batch = random_batch(a)
    a.update(batch)
    b.update(batch)
    for pa, pb in zip(a.policy.parameters(), b.policy.parameters(), strict=True):
        assert torch.equal(pa, pb)


@pytest.mark.slow
def test_compiled_loss_matches_eager():
    eager, compiled = small_learner(seed=1), small_learner(seed=1, compile=True)
    batch = random_batch(eager)
    se, sc = eager.update(batch), compiled.update(batch)
    for key in ("loss_policy", "loss_value", "entropy"):
        assert sc[key] == pytest.approx(se[key], rel=1e-4, abs=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_bf16_update_allocates_no_new_segments():
    cfg = PPOConfig(hidden_sizes=(64, 64), bf16=True, num_minibatches=4, update_epochs=2)
    learner = PPOLearner(cfg, 12, ActionSpec("multi_discrete", nvec=(3, 3, 2)), device="cuda")
    batch = random_batch(small_learner(), t=32, b=16).to("cuda")
    for _ in range(3):
        learner.update(batch)
    torch.cuda.synchronize()
    segments = torch.cuda.memory_stats()["segment.all.allocated"]
    for _ in range(5):
        stats = learner.update(batch)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["segment.all.allocated"] == segments
    assert math.isfinite(stats["loss_policy"])
    assert learner.optimizer.param_groups[0].get("fused")


def test_one_sample_minibatches_stay_finite():
    learner = small_learner(num_minibatches=8)
    learner.update(random_batch(learner, t=2, b=4))
    assert all(bool(p.isfinite().all()) for p in learner.policy.parameters())


@pytest.mark.parametrize(("field", "value", "named"), [
    ("rewards", float("nan"), "rewards of the batch"),
    ("rewards", 3e38, "weights after the update"),  # finite, but the returns overflow
    ("values", float("inf"), "behaviour values of the batch"),
])
def test_non_finite_updates_are_refused_naming_what(field, value, named):
    from learner import NonFiniteError

    learner = small_learner()
    batch = random_batch(learner)
    batch[field].fill_(value)
    with pytest.raises(NonFiniteError, match=f"non-finite .*{named}"):
        learner.update(batch)
