"""The learner side: stale chunks dropped and counted, batches assembled column-block-wise."""

from __future__ import annotations

import torch

from monitoring import Metrics
from pipeline.cli import parse_config
from pipeline.components import build
from pipeline.config import resolve
from pipeline.learner_side import LearnerSide


def parts_for(tmp_path, *extra: str):
    argv = ["--actors", "2", "--envs-per-actor", "4", "--rollout-len", "4", "--opponent", "straight",
            "--reward", "outcome", "--device", "cpu", "--total-steps", "64", "--display", "none",
            "--run-dir", str(tmp_path), "--set", "ppo.hidden_sizes=[8]", "--set", "ppo.update_epochs=1",
            *extra]
    return build(resolve(parse_config(argv), "cpu"))


def produce(parts, actor_id: int, version: int):
    slot = parts.ring.acquire_write(actor_id)
    parts.actors[actor_id].rollout(slot)
    parts.ring.commit(slot, version)
    return slot


def test_stale_chunks_are_dropped_and_counted(tmp_path):
    parts = parts_for(tmp_path, "--max-policy-lag", "1", "--slots-per-batch", "1")
    metrics = Metrics()
    side = LearnerSide(parts, metrics)
    parts.learner.policy_version = 5
    produce(parts, 0, version=3)  # lag 2 > 1: dropped
    fresh = produce(parts, 1, version=4)  # lag 1: kept
    slots = side.collect(timeout=1.0)
    assert slots == [fresh]
    s = parts.ring.stats()
    assert s.stale_chunks == 1 and s.dropped_samples == 16
    assert metrics.snapshot().dropped_chunks == {"stale": 1}
    side.train_on(slots)
    s = parts.ring.stats()
    assert s.consumed_samples == 16 and s.free == s.capacity
    assert s.produced_samples == s.consumed_samples + s.dropped_samples + s.in_flight_samples
    assert side.lags == [1]


def test_multi_slot_batch_columns_and_versions(tmp_path):
    parts = parts_for(tmp_path, "--slots-per-batch", "2")
    side = LearnerSide(parts, Metrics())
    a = produce(parts, 0, version=0)
    b = produce(parts, 1, version=0)
    slots = side.collect(timeout=1.0)
    assert slots == [a, b]  # oldest first
    batch = side.assemble(slots)
    batch.validate(obs_dim=parts.layout.size, action_dim=3)
    assert torch.equal(batch.obs[:, :4], a.obs) and torch.equal(batch.obs[:, 4:], b.obs)
    assert torch.equal(batch.terminated[:, 4:], b.terminated)
    assert torch.equal(batch.next_values[4:], b.next_values)
    assert batch.policy_versions.tolist() == [0] * 8
    # A short final batch (draining) covers only the slots given.
    short = side.assemble([a])
    short.validate(obs_dim=parts.layout.size, action_dim=3)
    assert short.num_envs == 4 and torch.equal(short.actions, a.actions)


def test_update_publishes_new_weights(tmp_path):
    parts = parts_for(tmp_path, "--slots-per-batch", "1")
    side = LearnerSide(parts, Metrics())
    produce(parts, 0, version=0)
    before = parts.publisher.version
    stats = side.train_on(side.collect(timeout=1.0))
    assert parts.publisher.version == parts.learner.policy_version == before + 1
    assert "loss_policy" in stats
    actor = parts.actors[1]
    assert actor.sync_weights(parts.publisher) == before + 1
    for p, q in zip(actor.policy.parameters(), parts.learner.policy.parameters(), strict=True):
        assert torch.equal(p, q)
