"""The ring of preallocated rollout slots between actors and the learner.

A slot moves FREE → WRITING → READY → READING → FREE. An actor takes a FREE slot (waiting,
measured, when there is none: backpressure), writes one T-step chunk, then commits it READY
stamped with its policy version and actor id; the learner takes READY slots oldest first and
releases them FREE when done. A half-written slot is aborted back to FREE and a stale chunk
dropped; both are counted, so at any moment::

    produced_samples == consumed_samples + dropped_samples + in_flight_samples

where *produced* counts every chunk that left WRITING (committed or aborted) and *in flight*
every READY or READING chunk. Nothing is allocated after construction.

The ring is thread-safe (one lock) and offers blocking calls for threads and ``async`` calls
for event-loop tasks; both kinds of waiter are woken on every state change. In debug mode every
slot is filled with a magic value when handed out for writing and checked on commit, so a
field the chunk failed to write raises :class:`UnwrittenSlotError` naming it.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from dataclasses import dataclass

import torch

from core.schema import RolloutSpec
from pipeline.transport.slots import RingSlot, SlotState, choose_placement


class RingClosed(RuntimeError):
    """Raised by a waiting call when the ring is closed (the run is stopping)."""


class UnwrittenSlotError(RuntimeError):
    """A committed chunk still holds the debug magic value in some field."""


class SlotStateError(RuntimeError):
    """A slot was handed back in a state that does not allow the transition."""


@dataclass(frozen=True)
class RingStats:
    """A consistent snapshot of the ring's counters (taken under its lock)."""

    capacity: int
    free: int
    writing: int
    ready: int
    reading: int
    reuses: int
    """Slot acquisitions for writing of a slot that had been used before."""
    produced_samples: int
    consumed_samples: int
    dropped_samples: int
    dropped_chunks: int
    in_flight_samples: int
    produced_chunks: int = 0
    consumed_chunks: int = 0
    aborted_chunks: int = 0
    """Half-written chunks given back (a failed actor); part of ``dropped_chunks``."""
    stale_chunks: int = 0
    """Chunks dropped for policy lag; part of ``dropped_chunks``."""
    write_waits: int = 0
    """Times an actor found no FREE slot and had to wait."""
    write_wait_s: float = 0.0
    """Total seconds actors waited for a FREE slot."""
    read_wait_s: float = 0.0
    """Total seconds the learner waited for READY slots."""


class RolloutRing:
    """Preallocated slots with the FREE → WRITING → READY → READING → FREE protocol."""

    def __init__(
        self,
        spec: RolloutSpec,
        num_slots: int,
        placement: str = "auto",
        actor_device: torch.device | str = "cpu",
        learner_device: torch.device | str = "cpu",
        debug: bool = False,
    ):
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_slots must be an integer >= 1, got {num_slots!r}")
        self.spec = spec
        self.placement = choose_placement(placement, torch.device(actor_device), torch.device(learner_device))
        self.debug = debug
        storage = torch.device(actor_device) if self.placement == "device" else torch.device("cpu")
        self.device = storage
        self.slots = [
            RingSlot(i, spec, storage, pin=self.placement == "pinned", share=self.placement == "shared")
            for i in range(num_slots)
        ]
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._ready: collections.deque[int] = collections.deque()
        self._free: collections.deque[int] = collections.deque(range(num_slots))
        self._closed = False
        self._production_ended = False
        self._sequence = 0
        self._c: collections.Counter[str] = collections.Counter()
        self._write_wait_s = 0.0
        self._read_wait_s = 0.0

    # ----------------------------------------------------------------- internals (lock held)
    def _notify_locked(self) -> None:
        self._cond.notify_all()
        waiters, self._async_waiters = self._async_waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # that loop is closed; nobody waits there any more
                pass

    def _check(self, slot: RingSlot, expected: SlotState, action: str) -> None:
        if slot is not self.slots[slot.index]:
            raise SlotStateError(f"{action}: slot does not belong to this ring")
        if slot.state != expected:
            raise SlotStateError(
                f"{action}: slot {slot.index} is {slot.state.name}, expected {expected.name}"
            )

    def _try_write_locked(self, actor_id: int) -> RingSlot | None:
        if self._closed or self._production_ended:
            raise RingClosed("ring closed" if self._closed else "production ended")
        if not self._free:
            return None
        slot = self.slots[self._free.popleft()]
        if slot.uses:
            self._c["reuses"] += 1
        slot.uses += 1
        slot.state = SlotState.WRITING
        slot.actor_id = actor_id
        slot.policy_version = -1
        return slot

    def _try_read_locked(self, n: int) -> list[RingSlot] | None:
        if self._closed:
            raise RingClosed("ring closed")
        if len(self._ready) < n:
            writing = any(s.state == SlotState.WRITING for s in self.slots)
            if not self._production_ended or writing:
                return None
            n = len(self._ready)  # the last chunks: fewer than asked, or none
        out = []
        for _ in range(n):
            slot = self.slots[self._ready.popleft()]
            slot.state = SlotState.READING
            out.append(slot)
        return out

    def _prepare_for_writer(self, slot: RingSlot) -> RingSlot:
        # Outside the lock: filling is a kernel, the slot is already ours.
        if self.debug:
            slot.fill_magic()
        return slot

    # ----------------------------------------------------------------------- writer side
    def acquire_write(self, actor_id: int, timeout: float | None = None) -> RingSlot | None:
        """Take a FREE slot for writing (blocking). None if ``timeout`` passed first."""
        start = time.perf_counter()
        deadline = None if timeout is None else start + timeout
        with self._lock:
            slot = self._try_write_locked(actor_id)
            if slot is None:
                self._c["write_waits"] += 1
            while slot is None:
                remaining = None if deadline is None else deadline - time.perf_counter()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining)
                slot = self._try_write_locked(actor_id)
            self._write_wait_s += time.perf_counter() - start
        return None if slot is None else self._prepare_for_writer(slot)

    async def acquire_write_async(self, actor_id: int) -> RingSlot:
        """Take a FREE slot for writing, awaiting one without blocking the event loop."""
        start = time.perf_counter()
        counted = False
        while True:
            with self._lock:
                slot = self._try_write_locked(actor_id)
                if slot is not None:
                    self._write_wait_s += time.perf_counter() - start
                    break
                if not counted:
                    self._c["write_waits"] += 1
                    counted = True
                fut = self._register_locked()
            await fut
        return self._prepare_for_writer(slot)

    def commit(self, slot: RingSlot, policy_version: int) -> None:
        """WRITING → READY, stamped with the policy version that produced the chunk."""
        if self.debug:
            bad = slot.unwritten_fields()
            if bad:
                # The chunk is unusable: give it back so the accounting stays exact, then fail.
                self.abort(slot)
                raise UnwrittenSlotError(
                    f"actor {slot.actor_id} committed slot {slot.index} with unwritten field(s): "
                    f"{', '.join(bad)}"
                )
        with self._lock:
            self._check(slot, SlotState.WRITING, "commit")
            slot.policy_version = int(policy_version)
            slot.sequence = self._sequence
            self._sequence += 1
            slot.state = SlotState.READY
            self._ready.append(slot.index)
            self._c["produced_chunks"] += 1
            self._notify_locked()

    def abort(self, slot: RingSlot) -> None:
        """WRITING → FREE for a chunk that will not be finished; counted as produced and dropped."""
        with self._lock:
            self._check(slot, SlotState.WRITING, "abort")
            slot.state = SlotState.FREE
            self._free.append(slot.index)
            self._c["produced_chunks"] += 1
            self._c["aborted_chunks"] += 1
            self._notify_locked()

    # ----------------------------------------------------------------------- reader side
    def acquire_read(self, n: int = 1, timeout: float | None = None) -> list[RingSlot] | None:
        """Take ``n`` READY slots, oldest first (blocking). None if ``timeout`` passed first.
        After :meth:`end_production`, once no slot is WRITING: what is READY, possibly fewer
        than ``n`` (an empty list when the ring is drained)."""
        self._check_n(n)
        start = time.perf_counter()
        deadline = None if timeout is None else start + timeout
        with self._lock:
            slots = self._try_read_locked(n)
            while slots is None:
                remaining = None if deadline is None else deadline - time.perf_counter()
                if remaining is not None and remaining <= 0:
                    break
                self._cond.wait(remaining)
                slots = self._try_read_locked(n)
            self._read_wait_s += time.perf_counter() - start
        return slots

    async def acquire_read_async(self, n: int = 1) -> list[RingSlot]:
        """Take ``n`` READY slots, oldest first, awaiting them without blocking the loop
        (after :meth:`end_production` as :meth:`acquire_read`)."""
        self._check_n(n)
        start = time.perf_counter()
        while True:
            with self._lock:
                slots = self._try_read_locked(n)
                if slots is not None:
                    self._read_wait_s += time.perf_counter() - start
                    return slots
                fut = self._register_locked()
            await fut

    def ready_count(self) -> int:
        """READY slots now."""
        with self._lock:
            return len(self._ready)

    def release(self, slots: RingSlot | list[RingSlot]) -> None:
        """READING → FREE after the learner consumed the chunk(s)."""
        self._end_read(slots, dropped=False)

    def drop(self, slots: RingSlot | list[RingSlot]) -> None:
        """READING → FREE for chunk(s) the learner refuses (too stale); counted as dropped."""
        self._end_read(slots, dropped=True)

    def _end_read(self, slots: RingSlot | list[RingSlot], dropped: bool) -> None:
        slots = [slots] if isinstance(slots, RingSlot) else list(slots)
        with self._lock:
            for slot in slots:
                self._check(slot, SlotState.READING, "drop" if dropped else "release")
            for slot in slots:
                slot.state = SlotState.FREE
                self._free.append(slot.index)
                self._c["stale_chunks" if dropped else "consumed_chunks"] += 1
            self._notify_locked()

    # ------------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop: wake every waiter with :class:`RingClosed`; slots already held stay valid."""
        with self._lock:
            self._closed = True
            self._notify_locked()

    def end_production(self) -> None:
        """No chunk will be written any more: writers get :class:`RingClosed`, readers what is
        READY once the last WRITING slot is committed or aborted, then empty lists."""
        with self._lock:
            self._production_ended = True
            self._notify_locked()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def stats(self) -> RingStats:
        """A consistent snapshot of states and counters."""
        with self._lock:
            counts = collections.Counter(s.state for s in self.slots)
            c = self._c
            n = self.spec.samples
            dropped_chunks = c["aborted_chunks"] + c["stale_chunks"]
            return RingStats(
                capacity=len(self.slots),
                free=counts[SlotState.FREE],
                writing=counts[SlotState.WRITING],
                ready=counts[SlotState.READY],
                reading=counts[SlotState.READING],
                reuses=c["reuses"],
                produced_samples=c["produced_chunks"] * n,
                consumed_samples=c["consumed_chunks"] * n,
                dropped_samples=dropped_chunks * n,
                dropped_chunks=dropped_chunks,
                in_flight_samples=(counts[SlotState.READY] + counts[SlotState.READING]) * n,
                produced_chunks=c["produced_chunks"],
                consumed_chunks=c["consumed_chunks"],
                aborted_chunks=c["aborted_chunks"],
                stale_chunks=c["stale_chunks"],
                write_waits=c["write_waits"],
                write_wait_s=self._write_wait_s,
                read_wait_s=self._read_wait_s,
            )

    def nbytes(self) -> int:
        """Total bytes of slot storage."""
        return sum(s.nbytes() for s in self.slots)

    # ------------------------------------------------------------------------- helpers
    def _check_n(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(self.slots):
            raise ValueError(f"n must be an integer in [1, {len(self.slots)}], got {n!r}")

    def _register_locked(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._async_waiters.append((loop, fut))
        return fut


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
