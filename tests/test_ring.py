"""The ring protocol: states, accounting, debug fill, placement, and concurrent hammering."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest
import torch

from core.schema import RolloutSpec
from pipeline.transport.ring import RingClosed, RolloutRing, SlotStateError, UnwrittenSlotError
from pipeline.transport.slots import SlotState, choose_placement

SPEC = RolloutSpec(rollout_len=4, num_envs=3, obs_dim=5, action_dim=3)


def write_token(slot, token: int) -> None:
    """Write every field of the chunk with one token, in several separate steps."""
    slot.obs.fill_(token)
    slot.actions.fill_(token)
    slot.log_probs.fill_(token)
    slot.values.fill_(token)
    slot.rewards.fill_(token)
    slot.bootstrap_values.fill_(token)
    slot.next_values.fill_(token)
    slot.terminated.fill_(token % 2 == 0)
    slot.truncated.fill_(token % 2 == 1)


def read_token(slot) -> int:
    """The token a slot holds; fails if any field disagrees (a torn or overlapping write)."""
    token = int(slot.obs[0, 0, 0])
    for name in ("obs", "log_probs", "values", "rewards", "bootstrap_values", "next_values"):
        t = getattr(slot, name)
        assert bool((t == token).all()), f"field {name} torn in slot {slot.index}"
    assert bool((slot.actions == token).all())
    assert bool((slot.terminated == (token % 2 == 0)).all())
    assert bool((slot.truncated == (token % 2 == 1)).all())
    return token


def assert_exact(ring: RolloutRing) -> None:
    s = ring.stats()
    assert s.produced_samples == s.consumed_samples + s.dropped_samples + s.in_flight_samples
    assert s.free + s.writing + s.ready + s.reading == s.capacity


def test_cycle_and_stamps():
    ring = RolloutRing(SPEC, 2)
    slot = ring.acquire_write(actor_id=7)
    assert slot.state == SlotState.WRITING
    write_token(slot, 3)
    ring.commit(slot, policy_version=11)
    (got,) = ring.acquire_read(1)
    assert got is slot and got.actor_id == 7 and got.policy_version == 11
    assert read_token(got) == 3
    ring.release(got)
    s = ring.stats()
    assert (s.produced_samples, s.consumed_samples, s.in_flight_samples) == (12, 12, 0)
    assert s.free == 2


def test_oldest_first_and_reuse_counted():
    ring = RolloutRing(SPEC, 3)
    order = []
    for token in range(3):
        slot = ring.acquire_write(0)
        write_token(slot, token)
        ring.commit(slot, token)
        order.append(slot.index)
    got = ring.acquire_read(3)
    assert [read_token(s) for s in got] == [0, 1, 2]
    ring.release(got)
    assert ring.stats().reuses == 0
    ring.acquire_write(0)
    assert ring.stats().reuses == 1


def test_wrong_transitions_raise():
    ring = RolloutRing(SPEC, 2)
    slot = ring.acquire_write(0)
    with pytest.raises(SlotStateError, match="release: slot 0 is WRITING, expected READING"):
        ring.release(slot)
    write_token(slot, 1)
    ring.commit(slot, 0)
    with pytest.raises(SlotStateError, match="commit"):
        ring.commit(slot, 0)
    with pytest.raises(ValueError, match=r"n must be an integer in \[1, 2\], got 3"):
        ring.acquire_read(3)


def test_full_ring_write_times_out_and_wait_is_measured():
    ring = RolloutRing(SPEC, 1)
    ring.acquire_write(0)
    assert ring.acquire_write(1, timeout=0.05) is None
    s = ring.stats()
    assert s.write_waits == 1 and s.write_wait_s > 0


def test_abort_and_drop_are_counted():
    ring = RolloutRing(SPEC, 2)
    a = ring.acquire_write(0)
    ring.abort(a)
    b = ring.acquire_write(1)
    write_token(b, 2)
    ring.commit(b, 0)
    (got,) = ring.acquire_read(1)
    ring.drop(got)
    s = ring.stats()
    assert s.dropped_chunks == 2 and s.aborted_chunks == 1 and s.stale_chunks == 1
    assert s.produced_samples == 24 and s.consumed_samples == 0 and s.dropped_samples == 24
    assert_exact(ring)


@pytest.mark.parametrize(
    "skip", ["obs", "actions", "log_probs", "values", "rewards", "bootstrap_values", "next_values", "terminated", "truncated"]
)
def test_debug_magic_catches_unwritten_field(skip):
    ring = RolloutRing(SPEC, 1, debug=True)
    slot = ring.acquire_write(0)
    write_token(slot, 4)
    slot.fill_magic()  # back to magic, then write all but one field
    for name in ("obs", "actions", "log_probs", "values", "rewards", "bootstrap_values", "next_values"):
        if name != skip:
            getattr(slot, name).fill_(4)
    for name in ("terminated", "truncated"):
        if name != skip:
            getattr(slot, name).fill_(False)
    with pytest.raises(UnwrittenSlotError, match=skip):
        ring.commit(slot, 0)
    # The unusable chunk went back to FREE, counted dropped.
    assert ring.stats().aborted_chunks == 1 and ring.stats().free == 1
    assert_exact(ring)


def test_debug_catches_partially_written_field():
    ring = RolloutRing(SPEC, 1, debug=True)
    slot = ring.acquire_write(0)
    write_token(slot, 1)
    slot.fill_magic()
    write_token(slot, 1)
    slot.rewards[-1, -1] = -7.25e37  # one element of the last step left unwritten
    with pytest.raises(UnwrittenSlotError, match="rewards"):
        ring.commit(slot, 0)


def test_close_wakes_waiters():
    ring = RolloutRing(SPEC, 1)
    errors = []

    def reader():
        try:
            ring.acquire_read(1)
        except RingClosed as exc:
            errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.05)
    ring.close()
    t.join(5)
    assert not t.is_alive() and len(errors) == 1


def test_placement_choice():
    cpu, cuda = torch.device("cpu"), torch.device("cuda:0")
    assert choose_placement("auto", cpu, cpu) == "shared"
    assert choose_placement("auto", cuda, cuda) == "device"
    assert choose_placement("auto", cpu, cuda) == "pinned"
    assert choose_placement("device", cpu, cpu) == "device"
    with pytest.raises(ValueError, match="placement must be"):
        choose_placement("gpu", cpu, cpu)
    with pytest.raises(ValueError, match="'device' needs actors and learner on one device"):
        choose_placement("device", cuda, torch.device("cuda:1"))
    ring = RolloutRing(SPEC, 1, placement="auto")
    assert ring.placement == "shared" and ring.slots[0].obs.is_shared()


def test_pinned_placement_without_cuda_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(ValueError, match="'pinned' needs CUDA"):
        RolloutRing(SPEC, 1, placement="pinned")


def _hammer_threads(ring: RolloutRing, producers: int, chunks_each: int, consumers: int, batch: int):
    produced: list[int] = []
    consumed: list[int] = []
    lock = threading.Lock()
    failures: list[BaseException] = []
    stop = threading.Event()

    def producer(pid: int) -> None:
        rng = random.Random(pid)
        try:
            for k in range(chunks_each):
                token = pid * 10_000 + k
                slot = ring.acquire_write(pid)
                write_token(slot, token)
                if rng.random() < 0.3:
                    time.sleep(0.0005)  # let readers race a half-written slot if they could
                slot.obs.fill_(token)
                if rng.random() < 0.1:
                    ring.abort(slot)
                    continue
                ring.commit(slot, policy_version=k)
                with lock:
                    produced.append(token)
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    def consumer(cid: int) -> None:
        try:
            while True:
                slots = ring.acquire_read(batch, timeout=0.05)
                if slots is None:
                    if stop.is_set() and ring.stats().ready < batch:
                        return
                    continue
                tokens = [read_token(s) for s in slots]
                assert all(s.actor_id == t // 10_000 for s, t in zip(slots, tokens, strict=True))
                if cid == 0 and tokens[0] % 7 == 0:
                    ring.drop(slots)
                    tokens = [-1 - t for t in tokens]
                else:
                    ring.release(slots)
                with lock:
                    consumed.extend(tokens)
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    def monitor() -> None:
        while not stop.is_set():
            try:
                assert_exact(ring)
            except BaseException as exc:  # pragma: no cover
                failures.append(exc)
                return

    threads = [threading.Thread(target=producer, args=(p,)) for p in range(producers)]
    readers = [threading.Thread(target=consumer, args=(c,)) for c in range(consumers)]
    mon = threading.Thread(target=monitor)
    for t in [*threads, *readers, mon]:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    for t in [*readers, mon]:
        t.join(60)
    assert not failures, failures
    return produced, consumed


def test_threads_hammer_nothing_lost_or_duplicated():
    torch.set_num_threads(1)
    ring = RolloutRing(SPEC, 3, debug=True)
    produced, consumed = _hammer_threads(ring, producers=4, chunks_each=25, consumers=2, batch=1)
    s = ring.stats()
    got = [t if t >= 0 else -1 - t for t in consumed]
    assert len(got) == len(set(got)), "a chunk was read twice"
    assert sorted(got) == sorted(produced), "a committed chunk was lost"
    dropped_stale = sum(1 for t in consumed if t < 0)
    assert s.consumed_chunks == len(consumed) - dropped_stale
    assert s.stale_chunks == dropped_stale
    assert s.produced_chunks == 4 * 25
    assert s.aborted_chunks == 4 * 25 - len(produced)
    assert s.in_flight_samples == 0 and s.free == 3
    assert_exact(ring)


def test_threads_hammer_multi_slot_batches():
    ring = RolloutRing(SPEC, 4)
    produced, consumed = _hammer_threads(ring, producers=3, chunks_each=20, consumers=1, batch=2)
    got = [t if t >= 0 else -1 - t for t in consumed]
    assert len(got) == len(set(got))
    leftover = ring.stats().ready
    assert len(got) + leftover == len(produced)
    assert_exact(ring)


def test_asyncio_tasks_hammer():
    ring = RolloutRing(SPEC, 2, debug=True)
    produced: list[int] = []
    consumed: list[int] = []
    total = 3 * 40

    async def producer(pid: int) -> None:
        for k in range(40):
            slot = await ring.acquire_write_async(pid)
            write_token(slot, pid * 10_000 + k)
            await asyncio.sleep(0)  # yield mid-write: the consumer must not see this slot
            ring.commit(slot, k)
            produced.append(pid * 10_000 + k)

    async def consumer() -> None:
        while len(consumed) < total:
            (slot,) = await ring.acquire_read_async(1)
            consumed.append(read_token(slot))
            await asyncio.sleep(0)
            ring.release(slot)
            assert_exact(ring)

    async def main() -> None:
        await asyncio.wait_for(asyncio.gather(consumer(), *(producer(p) for p in range(3))), 60)

    asyncio.run(main())
    assert sorted(consumed) == sorted(produced) and len(set(consumed)) == total
    s = ring.stats()
    assert s.consumed_samples == total * SPEC.samples and s.write_waits > 0
    assert s.reuses == total - 2


def test_asyncio_waiter_woken_from_thread():
    ring = RolloutRing(SPEC, 1)

    async def main() -> int:
        def produce() -> None:
            time.sleep(0.02)
            slot = ring.acquire_write(0)
            write_token(slot, 9)
            ring.commit(slot, 1)

        t = threading.Thread(target=produce)
        t.start()
        (slot,) = await asyncio.wait_for(ring.acquire_read_async(1), 10)
        t.join()
        return read_token(slot)

    assert asyncio.run(main()) == 9
