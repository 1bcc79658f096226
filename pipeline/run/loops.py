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
import concurrent.futures
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch

from actors.step import ChunkInterrupted
from learner import RolloutBatch
from monitoring import Metrics, span
from pipeline.run.parts import RunActor, RunParts
from pipeline.run.turns import LEARNER, TurnOrder
from pipeline.transport.ring import RingClosed, RolloutRing
from pipeline.transport.slots import RingSlot, SlotState

EVENT_POLL_S = 0.0005
"""Sleep between CUDA event polls: short next to a chunk, long enough not to spin the loop."""

R = TypeVar("R")


@dataclass(frozen=True)
class ChunkOutcome:
    """Host-side facts about one committed chunk (read at the chunk boundary)."""

    actor_id: int
    samples: int
    """Agent-steps in the chunk."""
    physics_steps: int
    """Physics env-steps in the chunk."""
    wins: int
    draws: int
    losses: int
    lengths: torch.Tensor
    """Lengths of the episodes that ended in the chunk (decision steps)."""
    slot_wait_s: float
    """Seconds the actor waited for a FREE slot."""
    returns: torch.Tensor | None = None
    """Returns of the episodes that ended in the chunk (Gymnasium envs; the sim reports
    outcomes instead)."""


@dataclass(frozen=True)
class UpdateReport:
    """What one learner update consumed and produced."""

    samples: int
    lags: list[int]
    """Policy lag of each chunk trained on."""
    policy_version: int
    """The version the update produced (and published)."""
    stats: dict[str, float]
    """The PPO update's statistics (losses, entropy, KL, ...)."""


class RunHooks(Protocol):
    """What the loops tell the rest of the run (``pipeline.run.progress.RunProgress``)."""

    def on_chunk(self, outcome: ChunkOutcome) -> None:
        """A chunk was committed READY."""

    def on_update(self, report: UpdateReport) -> None:
        """An update finished (called on the learner's thread, after publishing)."""

    def on_busy(self, role: str, start: float, end: float) -> None:
        """``role`` (``actor`` or ``learner``) worked from ``start`` to ``end`` (perf_counter)."""

    def on_actor_failure(self, actor_id: int, exc: BaseException, dropped_chunk: bool) -> None:
        """An actor raised; raise ``RunFailed`` to stop the run instead of restarting it."""

    def on_interrupted_chunk(self) -> None:
        """A chunk was given up half-way because the run stops (its slot was aborted)."""


class Budget:
    """The run's chunks, counted so the learner trains on all of them.

    An actor claims a chunk before it writes one and gives the claim back if it fails. A chunk
    the learner drops as too stale is given back as well (:meth:`give_back`), and an actor
    writes a fresh one in its place, so a run trains its whole budget however many chunks
    policy lag cost it. Actors therefore stay until the budget is trained (:meth:`claim` waits
    while every chunk is claimed but not all are trained), and the learner trains a short last
    batch once every chunk is committed and none is left READY (:meth:`all_committed`).
    Everything here runs on the event loop's thread.
    """

    def __init__(self, total_chunks: int):
        self.total_chunks = total_chunks
        self.claimed = 0
        self.committed = 0
        """Chunks committed READY and not given back (trained, held or waiting in the ring)."""
        self.trained = 0
        self.given_back = 0
        """Stale chunks given back and written again."""
        self.stopped = False
        self._waiters: list[asyncio.Future[None]] = []

    async def claim(self) -> bool:
        """Reserve one chunk; False once the budget is trained or the run stops. While every
        chunk is claimed but some are not yet trained, wait: one may be given back."""
        while not self.stopped:
            if self.claimed < self.total_chunks:
                self.claimed += 1
                return True
            if self.trained >= self.total_chunks:
                return False
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut
        return False

    def unclaim(self) -> None:
        """Give back a reserved chunk that was not produced."""
        self.claimed -= 1
        self._wake()

    def commit(self) -> None:
        """A claimed chunk was committed READY."""
        self.committed += 1

    def give_back(self) -> None:
        """A committed chunk was dropped unread (too stale): an actor writes it again."""
        self.claimed -= 1
        self.committed -= 1
        self.given_back += 1
        self._wake()

    def add_trained(self, chunks: int) -> None:
        """The learner trained on ``chunks`` chunks."""
        self.trained += chunks
        self._wake()

    def all_committed(self) -> bool:
        """Every chunk of the budget is committed: no more will come unless one is given back."""
        return self.committed >= self.total_chunks

    def stop(self) -> None:
        """No more claims; waiting actors return."""
        self.stopped = True
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


class Scheduler:
    """Where the loops' blocking work runs: worker threads side by side (async) or one thread,
    one piece at a time (sync), and in sync mode in which order the loops take their turns."""

    def __init__(self, hooks: RunHooks, sync: bool, actor_threads: int):
        self.hooks = hooks
        self.sync = sync
        self.turns: TurnOrder | None = None
        """Sync mode's turn order, set by :meth:`seat` when the loops start."""
        if sync:
            # One worker thread for both roles: work runs one piece at a time, in the order the
            # loops hand it over, and the event loop stays free to take a signal at once.
            one = concurrent.futures.ThreadPoolExecutor(1, "in-turn")
            self._pools = {"actor": one, "learner": one}
        else:
            # Separate pools: the learner never queues behind actor chunks, and chunks run on
            # at most ``run.actor_threads`` threads (see RunConfig.actor_threads).
            self._pools = {"actor": concurrent.futures.ThreadPoolExecutor(actor_threads, "actor"),
                           "learner": concurrent.futures.ThreadPoolExecutor(1, "learner")}

    async def run(self, role: str, fn: Callable[..., R], *args: Any, busy: bool = True) -> R:
        """``fn(*args)`` as ``role``'s work; ``busy``: counted in its busy time."""
        start = time.perf_counter()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pools[role], fn, *args)
        finally:
            if busy:
                self.hooks.on_busy(role, start, time.perf_counter())

    async def watch(self, role: str, work: Awaitable[R]) -> R:
        """Await ``work`` running on the event loop itself, counted as ``role``'s busy time."""
        start = time.perf_counter()
        try:
            return await work
        finally:
            self.hooks.on_busy(role, start, time.perf_counter())

    async def written(self, slot: RingSlot) -> None:
        """Wait until the device finished writing ``slot`` (CUDA; at once on the CPU)."""
        event = slot.written_event
        if event is None:
            return
        if self.sync:
            event.synchronize()  # in turn: the chunk completes first
            return
        while not event.query():
            await asyncio.sleep(EVENT_POLL_S)

    async def turn(self) -> None:
        """Sync: let the other loops have their turn (async: they run anyway)."""
        if self.sync:
            await asyncio.sleep(0)

    def seat(self, actors: int) -> None:
        """Sync: actors ``0 .. actors - 1`` and the learner take turns from now on."""
        if self.sync:
            self.turns = TurnOrder(actors)

    async def claim_in_turn(self, actor_id: int, budget: Budget) -> bool:
        """Wait for ``actor_id``'s turn (sync), then claim a chunk of ``budget``; an actor that
        gets none leaves the turn order."""
        if self.turns is not None:
            await self.turns.take(actor_id)
        if await budget.claim():
            return True
        self.leave(actor_id)
        return False

    async def until_ready(self, ring: RolloutRing) -> None:
        """Sync, the learner: hand the turn on to the actors until a chunk is READY in ``ring``
        (or no actor is left to write one)."""
        turns = self.turns
        while turns is not None and not turns.opened and turns.actors_left() and ring.ready_count() == 0:
            turns.end(LEARNER)
            await turns.take(LEARNER)

    def end_turn(self, party: int) -> None:
        """Sync: ``party`` (an actor id or ``LEARNER``) is done with its turn."""
        if self.turns is not None:
            self.turns.end(party)

    def leave(self, party: int) -> None:
        """Sync: ``party``'s loop ended; it takes no more turns."""
        if self.turns is not None:
            self.turns.leave(party)

    def shutdown(self) -> None:
        """Stop the worker threads (a thread inside a kernel is not waited for)."""
        for pool in set(self._pools.values()):
            pool.shutdown(wait=False)


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
            await recover(run, actor_id, slot, exc)
        run.sched.end_turn(actor_id)
        await run.sched.turn()


async def learner_loop(run: Run) -> None:
    """The learner: collect → update → release → publish, until the ring is drained or stopped."""
    while slots := await run.intake.collect(run.budget, run.sched):
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


# ---------------------------------------------------------------------------- the intake
class BatchIntake:
    """The learner's side of the ring: fresh READY slots in, one PPO batch out.

    The learner takes READY slots oldest first, one at a time, until it holds
    ``slots_per_batch`` fresh ones; a chunk whose policy lag (learner version − the version that
    produced it) exceeds ``max_policy_lag`` is dropped on the spot, counted. One slot on the
    learner's own device is used in place; several slots (or slots in host memory) are copied
    column-block-wise into a preallocated batch on the learner's device, on the learner's
    stream, non-blocking from pinned memory. After the update the slots' ``read_event`` is
    recorded (CUDA), which the next writer's stream waits on.
    """

    def __init__(self, parts: RunParts, metrics: Metrics):
        self.ring = parts.ring
        self.learner = parts.learner
        self.metrics = metrics
        cfg = parts.config
        self.slots_per_batch = cfg.intake.slots_per_batch
        self.max_lag = cfg.intake.max_policy_lag
        self.device = parts.device
        # High priority: the learner's kernels go first when actors fill the device, which
        # keeps the policy lag down (and takes the stream from the separate high-priority pool).
        self.stream = torch.cuda.Stream(self.device, priority=-1) if self.device.type == "cuda" else None
        spec = self.ring.spec
        self._in_place = self.slots_per_batch == 1 and self.ring.device == self.device
        self._pinned = self.ring.placement == "pinned"
        versions = torch.zeros(self.slots_per_batch * spec.num_envs, dtype=torch.int64, device=self.device)
        self._batch = RolloutBatch.of(spec.allocate(self.device, envs=self.slots_per_batch * spec.num_envs),
                                      versions) if not self._in_place else None
        self._versions = versions
        self.held: list[RingSlot] = []
        """Fresh slots taken for the next batch but not yet trained on."""
        if self.stream is not None:
            # The learner's parameters, optimizer state (a resumed run's too) and the batch
            # buffers above were written on the caller's stream.
            self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def lag_of(self, slot: RingSlot) -> int:
        """Versions between the learner and the policy that wrote ``slot``."""
        return self.learner.policy_version - slot.policy_version

    async def collect(self, budget: Budget | None = None, sched: Scheduler | None = None) -> list[RingSlot]:
        """Await ``slots_per_batch`` fresh slots; fewer once no more can come (every chunk of
        ``budget`` committed and none READY, or production ended and the ring drained); none
        when the run stops (held slots then count as dropped). A stale slot is dropped and
        given back to ``budget``, which has it written again. In sync mode ``sched`` hands the
        learner's turn on while no slot is READY."""
        start = time.perf_counter()
        try:
            while len(self.held) < self.slots_per_batch:
                if (self.held and budget is not None and budget.all_committed()
                        and self.ring.ready_count() == 0):
                    break  # the budget's last chunks: train on what is held
                if sched is not None:
                    await sched.until_ready(self.ring)
                got = await self.ring.acquire_read_async(1)
                if not got:
                    break  # drained: train on what is held
                if self.lag_of(got[0]) > self.max_lag:
                    self.ring.drop(got)
                    self.metrics.add_dropped_chunks(1, "stale")
                    if budget is not None:
                        budget.give_back()
                else:
                    self.held.append(got[0])
        except RingClosed:
            self.unread_held()
            return []
        slots, self.held = self.held, []
        if slots:
            self.metrics.observe_batch_wait(time.perf_counter() - start)
        return slots

    def unread_held(self) -> None:
        """Give back held slots without training on them (a stopped run): counted dropped."""
        if self.held:
            self.ring.drop(self.held)
            self.metrics.add_dropped_chunks(len(self.held), "shutdown")
            self.held = []

    def on_stream(self) -> contextlib.AbstractContextManager[Any]:
        """The learner's CUDA stream as the current one (nothing on the CPU)."""
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def assemble(self, slots: list[RingSlot]) -> RolloutBatch:
        """A batch over ``slots`` (views in place, or copies into the preallocated batch)."""
        B, n = self.ring.spec.num_envs, len(slots)
        if not 1 <= n <= self.slots_per_batch:
            raise ValueError(f"need 1..{self.slots_per_batch} slots for a batch, got {n}")
        for k, slot in enumerate(slots):
            self._versions[k * B : (k + 1) * B].fill_(slot.policy_version)
        if self.stream is not None:
            for slot in slots:
                if slot.written_event is not None:
                    self.stream.wait_event(slot.written_event)
        if self._batch is None:
            return RolloutBatch.of(slots[0], self._versions[:B])
        for k, slot in enumerate(slots):
            self._batch.copy_columns_(slot, slice(k * B, (k + 1) * B), non_blocking=self._pinned)
        if self._pinned:
            self.metrics.add_copy_bytes("h2d", sum(s.nbytes() for s in slots))
        # A short final batch (draining at the end of the run): the first n column blocks.
        return self._batch if n == self.slots_per_batch else self._batch.columns_batch(n * B)

    def mark_read(self, slots: list[RingSlot]) -> None:
        """Record that the learner's stream finished reading ``slots`` (CUDA)."""
        if self.stream is None:
            return
        for slot in slots:
            if slot.read_event is not None:
                slot.read_event.record(self.stream)
