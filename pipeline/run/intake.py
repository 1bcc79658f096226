"""The learner's side of the ring (:class:`BatchIntake`): fresh READY slots in, one PPO batch out."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from learner import RolloutBatch
from monitoring import Metrics
from pipeline.run.budget import Budget
from pipeline.run.parts import RunParts
from pipeline.run.scheduler import Scheduler
from pipeline.transport.ring import RingClosed
from pipeline.transport.slots import RingSlot


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
