"""The metrics facade: exact accounting, bucket semantics, no-op mode, input errors, no host sync."""

from __future__ import annotations

import subprocess
import sys
import threading
from dataclasses import dataclass

import pytest
import torch

from monitoring import Metrics
from monitoring.histograms import POLICY_LAG_BUCKETS, WAIT_BUCKETS_S, DeviceHistogram


def test_counters_accumulate_per_actor_and_label() -> None:
    m = Metrics()
    m.add_actor_steps(0, 10, 50)
    m.add_actor_steps(1, 3, 15)
    m.add_actor_steps(0, 5, 25)
    m.add_learner_samples(7)
    m.add_learner_samples(8)
    m.add_dropped_chunks(2)
    m.add_dropped_chunks(1, reason="aborted")
    m.add_copy_bytes("h2d", 100)
    m.add_copy_bytes("d2h", 40)
    m.add_copy_bytes("h2d", 1)
    snap = m.snapshot()
    assert snap.agent_steps == {0: 15, 1: 3}
    assert snap.physics_steps == {0: 75, 1: 15}
    assert snap.learner_samples == 15
    assert snap.dropped_chunks == {"stale": 2, "aborted": 1}
    assert snap.copy_bytes == {"h2d": 101, "d2h": 40}


def test_histogram_buckets_are_inclusive_upper_bounds() -> None:
    hist = DeviceHistogram((1.0, 2.0, 5.0))
    for v in (0.5, 1.0, 1.5, 2.0, 7.0):
        hist.observe(v)
    snap = hist.snapshot()
    # le=1: {0.5, 1.0}; le=2: + {1.5, 2.0}; le=5: same; +Inf: + {7.0}
    assert snap.cumulative == (2, 4, 4, 5)
    assert snap.count == 5
    assert snap.sum == pytest.approx(12.0)


def test_tensor_path_matches_host_path() -> None:
    values = [0, 1, 1, 2, 3, 5, 9, 40, 100]
    host, device = DeviceHistogram(POLICY_LAG_BUCKETS), DeviceHistogram(POLICY_LAG_BUCKETS)
    host.observe_sequence(values)
    device.observe_tensor(torch.tensor(values))
    assert host.snapshot() == device.snapshot()


def test_masked_tensor_observations_count_only_selected() -> None:
    hist = DeviceHistogram((10.0, 100.0))
    hist.observe_tensor(torch.tensor([5, 50, 500, 7]), torch.tensor([True, False, True, False]))
    snap = hist.snapshot()
    assert snap.cumulative == (1, 1, 2)
    assert snap.sum == pytest.approx(505.0)


def test_bad_histogram_bounds() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        DeviceHistogram((1.0, 1.0))
    with pytest.raises(ValueError, match="finite"):
        DeviceHistogram(())


def test_waits_lag_and_updates() -> None:
    m = Metrics()
    m.observe_slot_wait(0, 3e-6)
    m.observe_slot_wait(0, 0.2)
    m.observe_slot_wait(2, 1e-6)
    m.observe_batch_wait(0.004)
    m.observe_policy_lag(0)
    m.observe_policy_lag([1, 2])
    m.observe_policy_lag(torch.tensor([3, 100]))
    m.observe_update({"loss_policy": 0.5, "entropy": torch.tensor(1.25), "approx_kl": 0.01}, 4)
    m.observe_update({"loss_policy": 0.25}, 5)
    snap = m.snapshot()
    assert sorted(snap.slot_wait) == [0, 2]
    wait0 = snap.slot_wait[0]
    assert wait0.count == 2
    assert wait0.cumulative[WAIT_BUCKETS_S.index(5e-6)] == 1  # 3 µs lands in the 5 µs bucket
    assert wait0.cumulative[WAIT_BUCKETS_S.index(0.25)] == 2
    assert snap.batch_wait.count == 1 and snap.batch_wait.sum == pytest.approx(0.004)
    assert snap.policy_lag.count == 5
    assert snap.policy_lag.cumulative[-2] == 4  # 100 is above the last bound (64)
    assert snap.policy_lag.sum == pytest.approx(106)
    assert snap.learner_updates == 2
    assert snap.policy_version == 5
    assert snap.update_stats == {"loss_policy": 0.25, "entropy": 1.25, "approx_kl": 0.01}


def test_episodes_from_device_counts_and_masked_lengths() -> None:
    m = Metrics()
    winner = torch.tensor([0, 1, 2, 0, -1])
    done = winner >= 0
    lengths = torch.tensor([30, 600, 90, 15, 4])
    m.record_episodes(
        1, "pursuit",
        wins=(done & (winner == 0)).sum(), draws=(done & (winner == 2)).sum(),
        losses=(done & (winner == 1)).sum(), lengths=lengths, done_mask=done,
    )
    m.record_episodes(1, "pursuit", wins=1, draws=0, losses=2, lengths=[50, 60, 70])
    m.record_episodes(0, "crank", wins=torch.tensor(1), draws=0, losses=0, lengths=torch.tensor([42]))
    snap = m.snapshot()
    assert snap.episodes == {
        (1, "pursuit", "win"): 3, (1, "pursuit", "draw"): 1, (1, "pursuit", "loss"): 3,
        (0, "crank", "win"): 1, (0, "crank", "draw"): 0, (0, "crank", "loss"): 0,
    }
    pursuit = snap.episode_length["pursuit"]
    assert pursuit.count == 7  # 4 done in the masked batch + 3 host lengths
    assert pursuit.sum == pytest.approx(30 + 600 + 90 + 15 + 50 + 60 + 70)
    assert snap.episode_length["crank"].count == 1


@dataclass
class _Stats:
    capacity: int = 4
    free: int = 1
    writing: int = 1
    ready: int = 1
    reading: int = 1
    reuses: int = 9
    produced_samples: int = 100
    consumed_samples: int = 60
    dropped_samples: int = 10
    dropped_chunks: int = 1
    in_flight_samples: int = 30


class _Ring:
    def __init__(self) -> None:
        self.calls = 0

    def stats(self) -> _Stats:
        self.calls += 1
        return _Stats(reuses=self.calls)


def test_ring_is_read_at_snapshot_time() -> None:
    m = Metrics()
    ring = _Ring()
    m.watch_ring(ring)
    assert ring.calls == 0
    assert m.snapshot().ring.reuses == 1
    assert m.snapshot().ring.reuses == 2


def test_overlap_ratio() -> None:
    m = Metrics()
    assert m.snapshot().overlap_ratio is None
    m.set_overlap_ratio(0.25)
    assert m.snapshot().overlap_ratio == 0.25


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.add_actor_steps(0, -1, 0), "agent_steps must be >= 0"),
        (lambda m: m.add_actor_steps(0, 1.5, 0), "agent_steps must be an int"),
        (lambda m: m.add_actor_steps(0, torch.tensor(3), 0), "agent_steps must be an int"),
        (lambda m: m.observe_slot_wait(0, float("nan")), "seconds must be finite"),
        (lambda m: m.observe_batch_wait(-1.0), "seconds must be finite and >= 0"),
        (lambda m: m.add_copy_bytes("h2h", 1), "direction must be one of"),
        (lambda m: m.add_dropped_chunks(1, reason="bad reason\n"), "reason must be a label"),
        (lambda m: m.observe_update({"Loss": 1.0}, 1), "snake_case"),
        (lambda m: m.observe_update({"loss": "x"}, 1), r"stats\['loss'\] must be a number"),
        (lambda m: m.observe_update({"loss": torch.zeros(2)}, 1), "must be a scalar"),
        (lambda m: m.observe_policy_lag(torch.tensor([0.5])), "integer tensor"),
        (lambda m: m.observe_policy_lag([-1]), "lags"),
        (lambda m: m.record_episodes(0, "p", torch.zeros(2, dtype=torch.int64), 0, 0, []), "wins must be a 0-dim"),
        (lambda m: m.record_episodes(0, "p", torch.tensor(1.0), 0, 0, []), "integer or bool tensor"),
        (lambda m: m.record_episodes(0, "p", 0, 0, 0, torch.zeros(2, 2)), "lengths must be a 1-D tensor"),
        (lambda m: m.record_episodes(0, "p", 0, 0, 0, torch.zeros(3), torch.ones(2, dtype=torch.bool)), "done_mask must be"),
        (lambda m: m.record_episodes(0, "", 0, 0, 0, []), "opponent must be a label"),
        (lambda m: m.record_episodes(0, "x" * 257, 0, 0, 0, []), "opponent must be a label"),
        (lambda m: m.set_overlap_ratio(1.5), r"overlap ratio must be a number in \[0, 1\]"),
        (lambda m: m.watch_ring(object()), "ring must have a stats"),
    ],
)
def test_bad_input_is_refused_with_a_specific_message(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(Metrics())


def test_disabled_metrics_do_nothing() -> None:
    m = Metrics(enabled=False)
    m.add_actor_steps(0, 10, 10)
    m.add_actor_steps(0, -5, "not even checked")  # no-op: nothing is validated or stored
    m.record_episodes(0, "pursuit", 1, 0, 0, [10])
    m.set_overlap_ratio(0.5)
    m.watch_ring(_Ring())
    snap = m.snapshot()
    assert snap.agent_steps == {} and snap.episodes == {}
    assert snap.overlap_ratio is None and snap.ring is None


def test_concurrent_updates_are_exact() -> None:
    m = Metrics()

    def work(actor: int) -> None:
        for _ in range(2000):
            m.add_actor_steps(actor % 2, 1, 3)
            m.observe_slot_wait(actor % 2, 1e-5)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = m.snapshot()
    assert snap.agent_steps == {0: 4000, 1: 4000}
    assert snap.physics_steps == {0: 12000, 1: 12000}
    assert snap.slot_wait[0].count == 4000


def test_importing_the_facade_does_not_import_prometheus_client() -> None:
    code = (
        "import sys; from monitoring import Metrics, span; m = Metrics(); m.add_actor_steps(0, 1, 1)\n"
        "with span('actor:0:x'): pass\n"
        "assert 'prometheus_client' not in sys.modules, 'facade pulled in prometheus_client'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_device_updates_never_sync_the_host() -> None:
    m = Metrics()
    side = torch.cuda.Stream()
    winner = torch.tensor([0, 1, 2, 0, -1], device="cuda")
    lengths = torch.tensor([30, 600, 90, 15, 4], device="cuda")
    lags = torch.tensor([0, 1, 1, 7], device="cuda")

    def updates() -> None:
        done = winner >= 0
        m.record_episodes(
            0, "pursuit",
            wins=(done & (winner == 0)).sum(), draws=(done & (winner == 2)).sum(),
            losses=(done & (winner == 1)).sum(), lengths=lengths, done_mask=done,
        )
        m.observe_policy_lag(lags)
        m.observe_update({"loss_value": (lengths.float().mean())}, 1)

    with torch.cuda.stream(side):
        updates()  # the first call creates this stream's accumulators
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host sync inside the updates raises
    try:
        with torch.cuda.stream(side):
            for _ in range(2):
                updates()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    snap = m.snapshot()
    assert snap.episodes[(0, "pursuit", "win")] == 6
    assert snap.episodes[(0, "pursuit", "loss")] == 3
    assert snap.episode_length["pursuit"].count == 12
    assert snap.policy_lag.count == 12
    assert snap.update_stats["loss_value"] == pytest.approx(147.8)
