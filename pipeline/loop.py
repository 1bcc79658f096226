"""The two drivers: async (actors and learner overlap) and sync (in turn, the baseline).

Async: one event loop (``uvloop.run``); each actor and the learner is a task. Heavy CPU work
(a rollout chunk's kernel launches, a PPO update) runs in worker threads through
``asyncio.to_thread`` (PyTorch releases the GIL inside kernels); on CUDA a chunk's completion
is awaited by polling its ``written_event``, so the loop never blocks on the GPU.

Sync: the same orchestrator pieces called in turn on the main thread: actor chunks until a
batch is READY, then the update, and so on. Both end by draining the ring: every committed
chunk is trained on (the last batch may be short), so a finished run has nothing in flight.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from pipeline.orchestrator import Orchestrator, RunFailed
from pipeline.ring import RingClosed

EVENT_POLL_S = 0.0005
"""Sleep between CUDA event polls: short next to a chunk, long enough not to spin the loop."""


async def wait_event(event: Any) -> None:
    """Await a CUDA event's completion by polling (never blocks the event loop)."""
    while not event.query():
        await asyncio.sleep(EVENT_POLL_S)


def _install_signals(orch: Orchestrator, add: Callable[[int, Callable[[], None]], Any]) -> None:
    """First SIGINT/SIGTERM: graceful stop (checkpoint, exit 0). Second: exit at once; every
    saved file is written atomically, so the last checkpoint stays loadable."""

    def on_signal(signum: int) -> None:
        if orch.stop_requested:
            # Worker threads inside kernels cannot be interrupted: leave without joining them.
            sys.stderr.write("second interrupt: exiting now\n")
            sys.stderr.flush()
            os._exit(130)
        orch.request_stop(f"received {signal.Signals(signum).name}")

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread receives signals
    for sig in (signal.SIGINT, signal.SIGTERM):
        add(sig, on_signal)


# ---------------------------------------------------------------------------- async
async def _actor_task(orch: Orchestrator, actor_id: int, pool: concurrent.futures.Executor) -> None:
    loop = asyncio.get_running_loop()
    cuda = orch.parts.device.type == "cuda"
    while orch.claim():
        start = time.perf_counter()
        try:
            slot = await orch.ring.acquire_write_async(actor_id)
        except RingClosed:
            orch.unclaim()
            return
        orch.metrics.observe_slot_wait(actor_id, time.perf_counter() - start)
        try:
            await loop.run_in_executor(pool, orch.write_chunk, actor_id, slot)
            if cuda and slot.written_event is not None:
                await wait_event(slot.written_event)
            orch.finish_chunk(actor_id, slot)
        except Exception as exc:
            orch.actor_failed(actor_id, slot, exc)  # raises RunFailed past the limit
            await asyncio.to_thread(orch.restart_actor, actor_id)


async def _learner_task(orch: Orchestrator, pool: concurrent.futures.Executor) -> None:
    loop = asyncio.get_running_loop()
    side = orch.learner_side
    try:
        while not orch.stop_requested:
            slots = await side.collect_async()
            await loop.run_in_executor(pool, orch.train, slots)
    except RingClosed:
        pass


async def _reporter_task(orch: Orchestrator, mode: str) -> None:
    while True:
        await asyncio.sleep(orch.config.run.log_interval_s)
        orch.report(mode, force=True)


async def run_async(orch: Orchestrator) -> None:
    """Drive the run with overlapping actor and learner tasks on the running event loop."""
    loop = asyncio.get_running_loop()
    # Separate pools: the learner's thread never queues behind actor chunks, and actor chunks
    # run on at most ``run.actor_threads`` threads (see RunConfig.actor_threads).
    actor_pool = concurrent.futures.ThreadPoolExecutor(orch.config.run.actor_threads, "actor")
    learner_pool = concurrent.futures.ThreadPoolExecutor(1, "learner")
    _install_signals(orch, lambda sig, fn: loop.add_signal_handler(sig, fn, sig))
    actors = [asyncio.create_task(_actor_task(orch, i, actor_pool), name=f"actor:{i}")
              for i in range(orch.config.actors.count)]
    learner = asyncio.create_task(_learner_task(orch, learner_pool), name="learner")
    reporter = asyncio.create_task(_reporter_task(orch, "async"), name="reporter")
    try:
        pending: set[asyncio.Task[None]] = {*actors, learner}
        while not all(a.done() for a in actors):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception() is not None:
                    raise task.exception()
        # Producers finished (budget spent or stop): wake the learner out of its wait.
        orch.ring.close()
        await learner
    except BaseException as exc:
        orch.error = exc
        orch.request_stop(f"error: {type(exc).__name__}: {exc}")
        for task in [*actors, learner]:
            task.cancel()
        await asyncio.gather(*actors, learner, return_exceptions=True)
        raise
    finally:
        reporter.cancel()
        actor_pool.shutdown(wait=False)
        learner_pool.shutdown(wait=False)
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
    await asyncio.to_thread(finish, orch, "async")


def run_async_main(orch: Orchestrator) -> None:
    """Run :func:`run_async` on a fresh uvloop event loop (asyncio's where uvloop is missing)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        asyncio.run(run_async(orch))
        return
    uvloop.run(run_async(orch))


# ---------------------------------------------------------------------------- sync
def run_sync(orch: Orchestrator) -> None:
    """Drive the run with actors and learner in turn on this thread (the baseline)."""
    previous = {}

    def add(sig: int, fn: Callable[[int], None]) -> None:
        previous[sig] = signal.signal(sig, lambda signum, frame: fn(signum))

    _install_signals(orch, add)
    side = orch.learner_side
    try:
        while not orch.stop_requested:
            produced = False
            for actor_id in range(orch.config.actors.count):
                if not orch.claim():
                    break
                produced = True
                slot = orch.ring.acquire_write(actor_id)
                try:
                    orch.write_chunk(actor_id, slot)
                    if slot.written_event is not None:
                        slot.written_event.synchronize()  # in turn: the chunk completes first
                    orch.finish_chunk(actor_id, slot)
                except RunFailed:
                    raise
                except Exception as exc:
                    orch.actor_failed(actor_id, slot, exc)
                    orch.restart_actor(actor_id)
                while orch.ring.stats().ready >= side.slots_per_batch and not orch.stop_requested:
                    slots = side.collect(timeout=0)
                    if slots is not None:
                        orch.train(slots)
                orch.report("sync")
            if not produced:
                break
    except RingClosed:
        pass  # a stop closed the ring while waiting
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    finish(orch, "sync")


# ---------------------------------------------------------------------------- shared end
def finish(orch: Orchestrator, mode: str) -> None:
    """Drain the ring (train on every committed chunk) unless stopping, then final report."""
    side = orch.learner_side
    if orch.stop_requested:
        side.unread_held()
    else:
        orch.ring.reopen()
        for batch in side.drain_batches():
            orch.train(batch)
    orch.report(mode, force=True)
