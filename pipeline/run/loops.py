"""The two loops of a run, and how they are scheduled.

:func:`actor_loop`: claim a chunk of the budget → take a FREE ring slot → pull the newest weights
and roll out into the slot → commit it READY. :func:`learner_loop`: collect fresh READY chunks →
one PPO update on them → release the slots → publish the new weights. Both report through the
run's :class:`RunHooks` (progress, metrics, checkpoints live behind it) and never reach into
each other.

:func:`drive` runs every actor loop and the learner loop as tasks on one event loop. Their
blocking work (a chunk's kernel launches, an update) goes through a :class:`Scheduler`: async,
it runs in worker threads (PyTorch releases the GIL inside kernels) so actors and learner
overlap; sync (``--sync``, the baseline), it runs one piece at a time on one worker thread
while the loops take their turns in a fixed order (:class:`~pipeline.run.turns.TurnOrder`:
actor 0's chunk, the learner's updates, actor 1's chunk, ...), so a sync run is a function of
its config alone. Async mode makes no such promise: which actor fills which slot, and with
which weights, depends on timing. Both modes run this same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from actors.step import ChunkInterrupted, ContractViolation
from monitoring import span
from pipeline.run.budget import Budget
from pipeline.run.hooks import ChunkOutcome, RunHooks, UpdateReport
from pipeline.run.intake import BatchIntake
from pipeline.run.parts import RunActor, RunParts
from pipeline.run.scheduler import Scheduler
from pipeline.run.turns import LEARNER
from pipeline.transport.ring import RingClosed
from pipeline.transport.slots import RingSlot, SlotState


@dataclass
class Run:
    """What the loops work with."""

    parts: RunParts
    intake: BatchIntake
    budget: Budget
    sched: Scheduler
    hooks: RunHooks
    stop_reason: str = ""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    lockstep: Callable[[int], bool] | None = None
    """In a job of several ranks (:mod:`pipeline.run.ranks`): called on the learner's thread with
    the samples of the next batch (0: none), True when every rank holds one and updates."""

    def request_stop(self, reason: str) -> None:
        """Stop producing; waiting actors and the learner are woken through the ring."""
        if not self.budget.stopped:
            self.budget.stop()
            self.stop_reason = reason
            self.parts.ring.close()
            if self.sched.turns is not None:
                self.sched.turns.open()


# ---------------------------------------------------------------------------- the loops
async def actor_loop(run: Run, actor_id: int) -> None:
    """One actor: claim → slot → pull weights and roll out → commit, until the budget is spent
    (in sync mode one chunk a turn)."""
    ring = run.parts.ring
    while await run.sched.claim_in_turn(actor_id, run.budget):
        start = time.perf_counter()
        try:
            slot = await ring.acquire_write_async(actor_id)  # waits while the ring is full
        except RingClosed:
            run.budget.unclaim()
            run.sched.leave(actor_id)
            return
        wait_s = time.perf_counter() - start
        actor = run.parts.actors[actor_id]
        try:
            if actor.steps_on_event_loop and not run.sched.sync:
                # It steps in other processes: await them here, not in a thread.
                await run.sched.watch("actor", write_chunk_async(actor, run, slot))
            else:
                await run.sched.run("actor", write_chunk, actor, run, slot)
            await run.sched.written(slot)
            outcome = chunk_outcome(actor, wait_s)  # host reads: at the chunk boundary only
            ring.commit(slot, actor.policy_version)
            run.budget.commit()
            run.hooks.on_chunk(outcome)
        except ChunkInterrupted:
            ring.abort(slot)  # the run is stopping: the half-written chunk is dropped, counted
            run.budget.unclaim()
            run.hooks.on_interrupted_chunk()
            run.sched.leave(actor_id)
            return
        except Exception as exc:
            if stopped_mid_chunk(run, slot, exc):
                # Whatever ended the chunk of a stopping run (a child that went with the
                # signal), the actor is neither counted as failed nor restarted.
                ring.abort(slot)
                run.budget.unclaim()
                run.hooks.on_interrupted_chunk()
                run.sched.leave(actor_id)
                return
            await recover(run, actor_id, slot, exc)
        run.sched.end_turn(actor_id)
        await run.sched.turn()


async def learner_loop(run: Run) -> None:
    """The learner: collect → update → release → publish, until the ring is drained or stopped
    (in a job of several ranks: until any rank has no batch for the next update)."""
    while (slots := await run.intake.collect(run.budget, run.sched)) or run.lockstep is not None:
        if run.lockstep is not None and not await run.sched.run(
                "learner", run.lockstep, sum(s.spec.samples for s in slots), busy=False):
            if slots:  # another rank stopped: no rank trains again
                run.intake.held = slots
                run.intake.unread_held()
                run.request_stop("another rank of the job stopped")
            break
        await run.sched.run("learner", train_on, run, slots)
        run.budget.add_trained(len(slots))
        await run.sched.turn()
    run.sched.leave(LEARNER)


def write_chunk(actor: RunActor, run: Run, slot: RingSlot) -> None:
    """Blocking part of a chunk: pick up newer weights, then roll out into ``slot`` (given up
    between two decision steps when the run stops). An actor process pulls its weights itself;
    a league draws for it here, on its mirror, and the process gets the decisions with the chunk."""
    actor.sync_weights(run.parts.publisher)
    seat = actor.league_seat
    if run.parts.league is not None and seat is not None:
        run.parts.league.before_chunk(seat)  # results credited, opponents drawn
    actor.rollout(slot, should_stop=lambda: run.budget.stopped)


async def write_chunk_async(actor: RunActor, run: Run, slot: RingSlot) -> None:
    """:func:`write_chunk` for an actor whose chunk runs in other processes."""
    actor.sync_weights(run.parts.publisher)
    seat = actor.league_seat
    if run.parts.league is not None and seat is not None:
        run.parts.league.before_chunk(seat)
    await actor.rollout_async(slot, should_stop=lambda: run.budget.stopped)


def chunk_outcome(actor: RunActor, slot_wait_s: float) -> ChunkOutcome:
    """Check the chunk's deferred errors and read its episode outcomes."""
    actor.check_errors()
    episodes = actor.chunk_episodes()
    return ChunkOutcome(actor.actor_id, actor.samples_per_chunk, actor.physics_steps_per_chunk,
                        episodes.wins, episodes.draws, episodes.losses, episodes.lengths, slot_wait_s,
                        episodes.returns)


def train_on(run: Run, slots: list[RingSlot]) -> None:
    """Blocking: assemble the batch, update, release the slots, publish the new weights."""
    intake, learner = run.intake, run.parts.learner
    lags = [intake.lag_of(s) for s in slots]
    with intake.on_stream(), span("learner:update"):
        batch = intake.assemble(slots)
        stats = learner.update(batch)
        intake.mark_read(slots)
        run.parts.ring.release(slots)
        with span("learner:publish"):
            run.parts.publisher.publish(learner.policy, learner.policy_version, stream=intake.stream)
    report = UpdateReport(sum(s.spec.samples for s in slots), lags, learner.policy_version,
                          {k: float(v) for k, v in stats.items() if isinstance(v, (int, float))})
    run.hooks.on_update(report)


def stopped_mid_chunk(run: Run, slot: RingSlot, exc: Exception) -> bool:
    """Whether ``exc`` ended a chunk after the run began to stop (and is no broken contract,
    which stops the run with its message whenever it is met)."""
    return run.budget.stopped and slot.state == SlotState.WRITING and not isinstance(exc, ContractViolation)


async def recover(run: Run, actor_id: int, slot: RingSlot, exc: Exception) -> None:
    """Give a failed actor's slot back (counted dropped), report it, restart the actor."""
    stream = run.parts.actors[actor_id].stream
    if stream is not None:
        # Kernels enqueued before the exception may still write into the slot: let them
        # finish before the slot can be handed to another actor.
        with contextlib.suppress(RuntimeError):
            stream.synchronize()
    dropped = slot.state == SlotState.WRITING
    if dropped:
        run.parts.ring.abort(slot)
    run.budget.unclaim()
    run.hooks.on_actor_failure(actor_id, exc, dropped)  # raises RunFailed past the limit
    await run.sched.run("actor", run.parts.restart_actor, actor_id, busy=False)


# ---------------------------------------------------------------------------- scheduling
async def drive(run: Run, report: Callable[[], None], report_interval_s: float) -> None:
    """Run every actor loop and the learner loop to the end; ``report`` every interval."""
    run.sched.seat(len(run.parts.actors))
    actors = [asyncio.create_task(actor_loop(run, i), name=f"actor:{i}")
              for i in range(len(run.parts.actors))]
    learner = asyncio.create_task(learner_loop(run), name="learner")
    run.tasks = [*actors, learner]

    async def reporter() -> None:
        while True:
            await asyncio.sleep(report_interval_s)
            report()

    reporting = asyncio.create_task(reporter(), name="reporter")
    try:
        # The learner finishes only after the actors (it drains the ring), unless it fails.
        pending: set[asyncio.Task[None]] = {*actors, learner}
        while any(not a.done() for a in actors):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        run.parts.ring.end_production()
        await learner
    except BaseException as exc:
        run.request_stop(f"error: {type(exc).__name__}: {exc}")
        for task in run.tasks:
            task.cancel()
        await asyncio.gather(*run.tasks, return_exceptions=True)
        run.intake.unread_held()
        raise
    finally:
        reporting.cancel()
        run.sched.shutdown()
