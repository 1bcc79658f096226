"""Where the loops' blocking work runs (:class:`Scheduler`): worker threads side by side
(async), or one thread and a fixed turn order (sync, :mod:`pipeline.run.turns`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pipeline.run.budget import Budget
from pipeline.run.hooks import RunHooks
from pipeline.run.turns import LEARNER, TurnOrder
from pipeline.transport.ring import RolloutRing
from pipeline.transport.slots import RingSlot

EVENT_POLL_S = 0.0005
"""Sleep between CUDA event polls: short next to a chunk, long enough not to spin the loop."""

R = TypeVar("R")


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
