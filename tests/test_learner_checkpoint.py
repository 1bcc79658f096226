"""Checkpoints: round trip, resume, keep-last, layout refusal, damaged files."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from test_learner_ppo import random_batch, small_learner

from learner.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    load_policy,
    read_checkpoint,
    save_checkpoint,
)
from sim.config import SimConfig
from sim.layout import ObsLayout


def _layout(**changes) -> dict:
    return ObsLayout.from_config(SimConfig(**changes)).metadata()


def _seed_all(seed: int) -> None:
    # The legacy global numpy RNG is part of what a checkpoint restores.
    np.random.seed(seed)  # noqa: NPY002
    random.seed(seed)
    torch.manual_seed(seed)


def _draw() -> tuple[float, float, float]:
    return float(np.random.rand()), random.random(), torch.rand(1).item()  # noqa: NPY002


def _params(learner):
    return [t.detach().clone() for t in learner.policy.state_dict().values()]


def test_resume_continues_exactly(tmp_path):
    layout = _layout(obs_incoming_missiles=1, obs_own_missiles=1)
    obs_dim = layout["size"]
    assert obs_dim != 12
    from learner import ActionSpec, PPOConfig, PPOLearner

    def make():
        cfg = PPOConfig(hidden_sizes=(16,), num_minibatches=2, update_epochs=2, total_updates=6)
        return PPOLearner(cfg, obs_dim, ActionSpec("multi_discrete", nvec=(3, 3, 2)), obs_layout=layout)

    a = make()
    batches = [random_batch(a, seed=i) for i in range(4)]
    a.update(batches[0])
    a.update(batches[1])
    path = save_checkpoint(tmp_path, a, extra={"env_steps": 1234})
    a_stats = [a.update(batches[2]), a.update(batches[3])]

    b = make()
    extra = load_checkpoint(path, b)
    assert extra == {"env_steps": 1234}
    assert b.policy_version == 2
    b_stats = [b.update(batches[2]), b.update(batches[3])]
    assert [s["learning_rate"] for s in b_stats] == [s["learning_rate"] for s in a_stats]
    assert b.policy_version == a.policy_version == 4
    for pa, pb in zip(_params(a), _params(b), strict=True):
        assert torch.equal(pa, pb)


def test_rng_states_are_saved_and_restored(tmp_path):
    learner = small_learner()
    _seed_all(1)
    save_checkpoint(tmp_path, learner)
    draws = _draw()
    _seed_all(99)
    assert _draw() != draws
    load_checkpoint(tmp_path, small_learner())
    assert _draw() == draws


def test_checkpoint_contents_and_weights_only(tmp_path):
    learner = small_learner()
    learner.update(random_batch(learner))
    path = save_checkpoint(tmp_path, learner)
    assert path.name == "ckpt_000000001.pt" and (tmp_path / "latest.pt").is_file()
    state = torch.load(path, weights_only=True)
    assert {"model", "optimizer", "policy_version", "config", "obs_layout", "rng"} <= set(state)
    assert "obs_norm.mean" in state["model"] and float(state["model"]["obs_norm.count"]) == 128
    assert state["config"]["hidden_sizes"] == (32, 32)
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*tmp"))


def test_keep_last_and_latest(tmp_path):
    learner = small_learner()
    for i in range(5):
        learner.update(random_batch(learner, seed=i))
        save_checkpoint(tmp_path, learner, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt_000000004.pt", "ckpt_000000005.pt"]
    assert read_checkpoint(tmp_path)["policy_version"] == 5  # the folder means its latest.pt
    with pytest.raises(ValueError, match="keep_last must be an integer >= 1"):
        save_checkpoint(tmp_path, learner, keep_last=0)


def test_different_layout_is_refused_with_the_difference(tmp_path):
    from learner import ActionSpec, PPOConfig, PPOLearner

    saved_layout = _layout()
    cfg = PPOConfig(hidden_sizes=(8,))
    learner = PPOLearner(cfg, saved_layout["size"], ActionSpec("multi_discrete", nvec=(3, 3, 2)),
                         obs_layout=saved_layout)
    path = save_checkpoint(tmp_path, learner)
    other_layout = _layout(obs_incoming_missiles=2)
    other = PPOLearner(cfg, other_layout["size"], ActionSpec("multi_discrete", nvec=(3, 3, 2)),
                       obs_layout=other_layout)
    with pytest.raises(ValueError, match=r"different observation layout: .*size .* != .*missing now: incoming\[2\]"):
        load_checkpoint(path, other)
    # Same size, different network width: also refused, naming the field.
    wide = PPOLearner(PPOConfig(hidden_sizes=(16,)), saved_layout["size"],
                      ActionSpec("multi_discrete", nvec=(3, 3, 2)), obs_layout=saved_layout)
    with pytest.raises(ValueError, match="hidden_sizes"):
        load_checkpoint(path, wide)


def test_truncated_checkpoint_gives_clear_error_and_previous_stays_usable(tmp_path):
    learner = small_learner()
    learner.update(random_batch(learner))
    first = save_checkpoint(tmp_path, learner)
    learner.update(random_batch(learner, seed=1))
    second = save_checkpoint(tmp_path, learner)
    data = second.read_bytes()
    second.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"^checkpoint \S+ckpt_000000002\.pt is truncated or corrupt "
                                              r"\(a zip archive cut short at \d+ bytes\)$"):
        load_checkpoint(second, small_learner())
    with pytest.raises(CheckpointError, match=r"^no checkpoint at \S+missing\.pt \(no such file or directory\)$"):
        read_checkpoint(tmp_path / "missing.pt")
    fresh = small_learner()
    load_checkpoint(first, fresh)
    assert fresh.policy_version == 1


def test_load_policy_for_evaluation(tmp_path):
    learner = small_learner()
    learner.update(random_batch(learner))
    path = save_checkpoint(tmp_path, learner)
    policy = load_policy(path)
    obs = torch.randn(5, 12)
    a1, _, v1 = policy.act(obs, deterministic=True)
    a2, _, v2 = learner.policy.act(obs, deterministic=True)
    assert torch.equal(a1, a2) and torch.allclose(v1, v2)
    assert policy.policy_version == 1 and not policy.training
