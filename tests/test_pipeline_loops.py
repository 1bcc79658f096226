"""The loops' pieces: stale chunks dropped and counted, batches assembled column-block-wise,
an update publishing its weights, and a drained ring ending the learner loop."""

from __future__ import annotations

import asyncio
import time

import torch

from actors.sim_actor import SimActor
from monitoring import Metrics
from pipeline.config import resolve
from pipeline.config.flags import parse_config
from pipeline.run.budget import Budget
from pipeline.run.hooks import ChunkOutcome, UpdateReport
from pipeline.run.intake import BatchIntake
from pipeline.run.loops import Run, drive, train_on
from pipeline.run.parts import RunParts, build
from pipeline.run.scheduler import Scheduler


class Recorder:
    """Keeps what the loops report (the run's hooks)."""

    def __init__(self) -> None:
        self.chunks: list[ChunkOutcome] = []
        self.updates: list[UpdateReport] = []
        self.busy: list[tuple[str, float, float]] = []
        self.events: list[str] = []
        """``actor N`` for each chunk, ``update`` for each update, in the order they came."""

    def on_chunk(self, outcome: ChunkOutcome) -> None:
        self.chunks.append(outcome)
        self.events.append(f"actor {outcome.actor_id}")

    def on_update(self, report: UpdateReport) -> None:
        self.updates.append(report)
        self.events.append("update")

    def on_busy(self, role: str, start: float, end: float) -> None:
        self.busy.append((role, start, end))

    def on_actor_failure(self, actor_id: int, exc: BaseException, dropped_chunk: bool) -> None:
        raise exc

    def on_interrupted_chunk(self) -> None:
        self.interrupted = getattr(self, "interrupted", 0) + 1


def parts_for(tmp_path, *extra: str) -> RunParts:
    """The parts of a small run, actors as threads (these tests drive them in-process)."""
    argv = ["--actor-processes", "off", "--actors", "2", "--envs-per-actor", "4", "--rollout-len", "4", "--opponent", "straight",
            "--reward", "outcome", "--device", "cpu", "--total-steps", "64", "--display", "none",
            "--run-dir", str(tmp_path), "--set", "ppo.hidden_sizes=[8]", "--set", "ppo.update_epochs=1",
            *extra]
    return build(resolve(parse_config(argv), "cpu"))


def run_for(parts: RunParts, metrics: Metrics | None = None) -> Run:
    hooks = Recorder()
    return Run(parts, BatchIntake(parts, metrics or Metrics()), Budget(4), Scheduler(hooks, True, 1), hooks)


def produce(parts, actor_id: int, version: int):
    slot = parts.ring.acquire_write(actor_id)
    parts.actors[actor_id].rollout(slot)
    parts.ring.commit(slot, version)
    return slot


def test_stale_chunks_are_dropped_and_counted(tmp_path):
    parts = parts_for(tmp_path, "--max-policy-lag", "1", "--slots-per-batch", "1")
    metrics = Metrics()
    run = run_for(parts, metrics)
    parts.learner.policy_version = 5
    produce(parts, 0, version=3)  # lag 2 > 1: dropped
    fresh = produce(parts, 1, version=4)  # lag 1: kept
    slots = asyncio.run(run.intake.collect())
    assert slots == [fresh]
    s = parts.ring.stats()
    assert s.stale_chunks == 1 and s.dropped_samples == 16
    assert metrics.snapshot().dropped_chunks == {"stale": 1}
    train_on(run, slots)
    s = parts.ring.stats()
    assert s.consumed_samples == 16 and s.free == s.capacity
    assert s.produced_samples == s.consumed_samples + s.dropped_samples + s.in_flight_samples
    assert [r.lags for r in run.hooks.updates] == [[1]]


def test_multi_slot_batch_columns_and_versions(tmp_path):
    parts = parts_for(tmp_path, "--slots-per-batch", "2")
    run = run_for(parts)
    a = produce(parts, 0, version=0)
    b = produce(parts, 1, version=0)
    slots = asyncio.run(run.intake.collect())
    assert slots == [a, b]  # oldest first
    batch = run.intake.assemble(slots)
    batch.validate(obs_dim=parts.layout.size, action_dim=3)
    assert torch.equal(batch.obs[:, :4], a.obs) and torch.equal(batch.obs[:, 4:], b.obs)
    assert torch.equal(batch.terminated[:, 4:], b.terminated)
    assert torch.equal(batch.next_values[4:], b.next_values)
    assert batch.policy_versions.tolist() == [0] * 8
    # A short final batch (draining) covers only the slots given.
    short = run.intake.assemble([a])
    short.validate(obs_dim=parts.layout.size, action_dim=3)
    assert short.num_envs == 4 and torch.equal(short.actions, a.actions)


def test_update_publishes_new_weights(tmp_path):
    parts = parts_for(tmp_path, "--slots-per-batch", "1")
    run = run_for(parts)
    produce(parts, 0, version=0)
    before = parts.publisher.version
    train_on(run, asyncio.run(run.intake.collect()))
    assert parts.publisher.version == parts.learner.policy_version == before + 1
    assert "loss_policy" in run.hooks.updates[0].stats
    actor = parts.actors[1]
    assert actor.sync_weights(parts.publisher) == before + 1
    for p, q in zip(actor.policy.parameters(), parts.learner.policy.parameters(), strict=True):
        assert torch.equal(p, q)


def test_ended_production_drains_in_short_batches_then_ends(tmp_path):
    parts = parts_for(tmp_path, "--slots-per-batch", "2")
    run = run_for(parts)
    only = produce(parts, 0, version=0)
    writing = parts.ring.acquire_write(1)
    parts.ring.end_production()

    async def drain() -> list[list]:
        batches = []
        while slots := await run.intake.collect():
            batches.append(slots)
            parts.ring.release(slots)
        return batches

    async def main() -> list[list]:
        task = asyncio.create_task(drain())
        await asyncio.sleep(0.05)
        assert not task.done()  # a slot is still being written: the learner waits for it
        parts.actors[1].rollout(writing)
        parts.ring.commit(writing, 0)
        return await task

    assert asyncio.run(main()) == [[only, writing]]
    assert parts.ring.stats().consumed_chunks == 2


def test_stale_chunks_are_written_again_so_the_whole_budget_is_trained(tmp_path, monkeypatch):
    # Lag 0, and actor 1 misses the learner's newest weights twice: each of those chunks is
    # behind the learner, so it is dropped and an actor writes it again.
    original = SimActor.sync_weights
    missed = [0]

    def sync_weights(self, publisher):
        if self.actor_id == 1 and missed[0] < 2 and publisher.version > max(self.policy_version, 0):
            missed[0] += 1
            return self.policy_version
        return original(self, publisher)

    monkeypatch.setattr(SimActor, "sync_weights", sync_weights)
    parts = parts_for(tmp_path, "--max-policy-lag", "0", "--slots-per-batch", "1")
    hooks = Recorder()
    budget = Budget(6)
    run = Run(parts, BatchIntake(parts, Metrics()), budget, Scheduler(hooks, True, 1), hooks)
    asyncio.run(drive(run, lambda: None, 60.0))
    s = parts.ring.stats()
    assert s.stale_chunks == missed[0] == 2 and budget.given_back == s.stale_chunks
    assert s.consumed_chunks == budget.trained == 6  # nothing short of the budget
    assert sum(r.samples for r in hooks.updates) == 6 * parts.ring.spec.samples
    assert s.produced_chunks == s.consumed_chunks + s.stale_chunks and s.in_flight_samples == 0
    assert all(lag == 0 for r in hooks.updates for lag in r.lags)


def test_a_waiting_actor_returns_when_the_run_stops():
    budget = Budget(1)

    async def main() -> bool:
        assert await budget.claim()
        waiting = asyncio.create_task(budget.claim())  # all claimed, none trained: it waits
        await asyncio.sleep(0.01)
        assert not waiting.done()
        budget.stop()
        return await waiting

    assert asyncio.run(main()) is False


def test_sync_actors_take_turns_in_order_and_the_learner_trains_in_between(tmp_path, monkeypatch):
    # Actor 0's chunks take longest on the worker thread: the order must not care.
    original = SimActor.rollout

    def rollout(self, slot, should_stop=None):
        if self.actor_id == 0:
            time.sleep(0.02)
        original(self, slot, should_stop)

    monkeypatch.setattr(SimActor, "rollout", rollout)
    parts = parts_for(tmp_path, "--actors", "3", "--slots-per-batch", "2", "--ring-slots", "4")
    hooks = Recorder()
    run = Run(parts, BatchIntake(parts, Metrics()), Budget(7), Scheduler(hooks, True, 1), hooks)
    asyncio.run(drive(run, lambda: None, 60.0))
    assert hooks.events == ["actor 0", "actor 1", "update", "actor 2", "actor 0", "update",
                            "actor 1", "actor 2", "update", "actor 0", "update"]
    assert [r.lags for r in hooks.updates] == [[0, 0], [0, 0], [0, 0], [0]]
