"""The consuming side: READY slots → PPO batch → update → weights published.

The learner takes READY slots oldest first, one at a time, until it holds ``slots_per_batch``
fresh ones; a chunk whose policy lag (learner version − the version that produced it) exceeds
``max_policy_lag`` is dropped on the spot, counted. One slot on the learner's own device is used
in place; several slots (or slots in host memory) are copied column-block-wise into a
preallocated batch on the learner's device, on the learner's stream, non-blocking from pinned
memory. After the update the slots go back FREE (on CUDA after recording their ``read_event``,
which the next writer's stream waits on) and the new weights are published.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from actors.cuda_graph import CAPTURE_LOCK
from learner import RolloutBatch
from pipeline.components import Components
from pipeline.ring import RingSlot

try:
    from monitoring import span
except ImportError:  # the facade is optional for the learner side itself
    from torch.profiler import record_function as span


class LearnerSide:
    """Batches ring slots for the PPO learner and publishes its weights."""

    def __init__(self, parts: Components, metrics: Any):
        self.parts = parts
        self.ring = parts.ring
        self.learner = parts.learner
        self.metrics = metrics
        cfg = parts.config
        self.slots_per_batch = cfg.learner.slots_per_batch
        self.max_lag = cfg.learner.max_policy_lag
        self.device = parts.device
        # High priority: the learner's kernels go first when actors fill the device, which
        # keeps the policy lag down (and takes the stream from the separate high-priority pool).
        self.stream = torch.cuda.Stream(self.device, priority=-1) if self.device.type == "cuda" else None
        spec = self.ring.spec
        T, B, D, A = spec.rollout_len, spec.num_envs, spec.obs_dim, spec.action_dim
        self._in_place = self.slots_per_batch == 1 and self.ring.device == self.device
        self._pinned = self.ring.placement == "pinned"
        self._versions = torch.zeros(self.slots_per_batch * B, dtype=torch.int64, device=self.device)
        self._buf: RolloutBatch | None = None
        if not self._in_place:
            cols = self.slots_per_batch * B
            z = dict(device=self.device)
            self._buf = RolloutBatch(
                obs=torch.zeros(T, cols, D, dtype=spec.obs_dtype, **z),
                actions=torch.zeros(T, cols, A, dtype=spec.action_dtype, **z),
                log_probs=torch.zeros(T, cols, **z), values=torch.zeros(T, cols, **z),
                rewards=torch.zeros(T, cols, **z),
                terminated=torch.zeros(T, cols, dtype=torch.bool, **z),
                truncated=torch.zeros(T, cols, dtype=torch.bool, **z),
                bootstrap_values=torch.zeros(T, cols, **z), next_values=torch.zeros(cols, **z),
                policy_versions=self._versions,
            )
        self.updates = 0
        self.consumed_samples = 0
        self.last_stats: dict[str, float] = {}
        self.held: list[RingSlot] = []
        """Fresh slots taken for the next batch but not yet trained on."""
        self.lags: list[int] = []
        """Policy lag of every consumed chunk (for the summary)."""
        self.profile: Any = None
        """A ``monitoring.ProfileSession`` told of every finished update (``--profile``)."""
        if self.stream is not None:
            # The learner's parameters, optimizer state (a resumed run's too) and the batch
            # buffers above were written on the caller's stream.
            self.stream.wait_stream(torch.cuda.current_stream(self.device))

    # ------------------------------------------------------------------ slot intake
    def lag_of(self, slot: RingSlot) -> int:
        """Versions between the learner and the policy that wrote ``slot``."""
        return self.learner.policy_version - slot.policy_version

    def admit(self, slot: RingSlot) -> bool:
        """Keep a fresh slot (True) or drop a stale one back to FREE, counted (False)."""
        if self.lag_of(slot) > self.max_lag:
            self.ring.drop(slot)
            self.metrics.add_dropped_chunks(1, "stale")
            return False
        return True

    def collect(self, timeout: float | None = None, want: int | None = None) -> list[RingSlot] | None:
        """Blocking: ``want`` (default ``slots_per_batch``) fresh slots, or None on timeout."""
        want = want or self.slots_per_batch
        held: list[RingSlot] = []
        start = time.perf_counter()
        while len(held) < want:
            remaining = None if timeout is None else max(timeout - (time.perf_counter() - start), 0)
            got = self.ring.acquire_read(1, timeout=remaining)
            if got is None:
                if held:
                    self.unread(held)
                return None
            if self.admit(got[0]):
                held.append(got[0])
        self.metrics.observe_batch_wait(time.perf_counter() - start)
        return held

    async def collect_async(self) -> list[RingSlot]:
        """Await ``slots_per_batch`` fresh slots without blocking the event loop.

        Slots taken before an interruption (:class:`RingClosed`, cancellation) stay in
        :attr:`held` for :meth:`drain` or :meth:`unread`.
        """
        start = time.perf_counter()
        while len(self.held) < self.slots_per_batch:
            (slot,) = await self.ring.acquire_read_async(1)
            if self.admit(slot):
                self.held.append(slot)
        slots, self.held = self.held, []
        self.metrics.observe_batch_wait(time.perf_counter() - start)
        return slots

    def drain_batches(self) -> list[list[RingSlot]]:
        """After the producers stopped: every held and READY fresh slot, in batches of at most
        ``slots_per_batch`` (the last one may be short). Needs the ring open."""
        slots, self.held = self.held, []
        while True:
            got = self.ring.acquire_read(1, timeout=0)
            if got is None:
                break
            if self.admit(got[0]):
                slots.append(got[0])
        k = self.slots_per_batch
        return [slots[i : i + k] for i in range(0, len(slots), k)]

    def unread_held(self) -> None:
        """Give back held slots without training on them (interrupted run)."""
        if self.held:
            self.unread(self.held)
            self.held = []

    def unread(self, slots: list[RingSlot]) -> None:
        """Give back slots taken but not trained on (shutdown): they count as dropped."""
        self.ring.drop(slots)
        self.metrics.add_dropped_chunks(len(slots), "shutdown")

    # ------------------------------------------------------------------ batch and update
    def _stream_ctx(self) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def assemble(self, slots: list[RingSlot]) -> RolloutBatch:
        """A RolloutBatch over ``slots`` (views in place, or copies into the preallocated batch)."""
        B = self.ring.spec.num_envs
        n = len(slots)
        if not 1 <= n <= self.slots_per_batch:
            raise ValueError(f"need 1..{self.slots_per_batch} slots for a batch, got {n}")
        for k, slot in enumerate(slots):
            self._versions[k * B : (k + 1) * B].fill_(slot.policy_version)
        if self.stream is not None:
            for slot in slots:
                if slot.written_event is not None:
                    self.stream.wait_event(slot.written_event)
        if self._in_place:
            s = slots[0]
            return RolloutBatch(
                obs=s.obs, actions=s.actions, log_probs=s.log_probs, values=s.values,
                rewards=s.rewards, terminated=s.terminated, truncated=s.truncated,
                bootstrap_values=s.bootstrap_values, next_values=s.next_values,
                policy_versions=self._versions[:B],
            )
        buf = self._buf
        assert buf is not None
        for k, slot in enumerate(slots):
            cols = slice(k * B, (k + 1) * B)
            for name in ("obs", "actions", "log_probs", "values", "rewards", "terminated",
                         "truncated", "bootstrap_values"):
                getattr(buf, name)[:, cols].copy_(getattr(slot, name), non_blocking=self._pinned)
            buf.next_values[cols].copy_(slot.next_values, non_blocking=self._pinned)
        if self._pinned:
            self.metrics.add_copy_bytes("h2d", sum(s.nbytes() for s in slots))
        if n == self.slots_per_batch:
            return buf
        # A short final batch (draining at the end of the run): the first n column blocks.
        return RolloutBatch(**{
            name: getattr(buf, name)[..., : n * B] if name in ("next_values", "policy_versions")
            else getattr(buf, name)[:, : n * B]
            for name in RolloutBatch.__dataclass_fields__
        })

    def train_on(self, slots: list[RingSlot]) -> dict[str, float]:
        """Assemble, update, release the slots, publish the new weights. Blocking (run it in a
        worker thread from the event loop)."""
        lags = [self.lag_of(s) for s in slots]
        with self._stream_ctx(), span("learner:update"):
            batch = self.assemble(slots)
            stats = self.learner.update(batch)
            if self.stream is not None:
                for slot in slots:
                    if slot.read_event is not None:
                        slot.read_event.record(self.stream)
            self.ring.release(slots)
            with span("learner:publish"):
                self.parts.publisher.publish(self.learner.policy, self.learner.policy_version,
                                             stream=self.stream)
        samples = sum(s.spec.samples for s in slots)
        self.updates += 1
        self.consumed_samples += samples
        self.lags.extend(lags)
        self.last_stats = dict(stats)
        self.metrics.observe_policy_lag(lags)
        self.metrics.add_learner_samples(samples)
        self.metrics.observe_update(
            {k: v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
            self.learner.policy_version,
        )
        if self.profile is not None:
            with CAPTURE_LOCK:  # its end synchronizes the whole device (see actors.cuda_graph)
                self.profile.step()
        return stats
