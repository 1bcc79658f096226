"""The exporter: every catalogued family in a real scrape, promtool-clean, clear busy-port errors."""

from __future__ import annotations

import logging
import re
import shutil
import socket
import subprocess
import urllib.request
from dataclasses import dataclass

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from monitoring import Metrics
from monitoring.collector import CATALOG, registered_sample_names
from monitoring.exporter import (
    MetricsAddressError,
    MetricsPortInUseError,
    exposition,
    open_to_network,
    start_exporter,
)
from monitoring.http_server import MAX_CONNECTIONS, WORKERS


@dataclass
class _RingStats:
    capacity: int = 8
    free: int = 2
    writing: int = 2
    ready: int = 3
    reading: int = 1
    reuses: int = 40
    produced_samples: int = 4800
    consumed_samples: int = 3600
    dropped_samples: int = 0
    dropped_chunks: int = 0
    in_flight_samples: int = 1200


class _Ring:
    def stats(self) -> _RingStats:
        return _RingStats()


def full_metrics() -> Metrics:
    """A facade on which every update method has been called."""
    m = Metrics()
    m.add_actor_steps(0, 256, 1280)
    m.add_actor_steps(1, 128, 640)
    m.observe_slot_wait(0, 2e-5)
    m.observe_batch_wait(0.01)
    m.add_learner_samples(384)
    m.observe_update(
        {"loss_policy": 0.1, "loss_value": 0.7, "loss": 0.5, "entropy": 2.1, "approx_kl": 0.004,
         "clip_fraction": 0.05, "explained_variance": 0.3, "grad_norm": 0.9, "learning_rate": 3e-4,
         "value_clip_fraction": 0.02},
        policy_version=7,
    )
    m.observe_policy_lag(torch.tensor([0, 1, 2]))
    m.add_dropped_chunks(1, "stale")
    m.add_copy_bytes("h2d", 4096)
    m.record_episodes(0, "pursuit", torch.tensor(2), torch.tensor(1), 0, torch.tensor([40, 80, 600]))
    m.watch_ring(_Ring())
    m.set_overlap_ratio(0.35)
    m.set_league({"learner": 1530.0, "crank": 1470.0}, {("crank", "win"): 3, ("crank", "loss"): 5})
    return m


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def test_every_catalogued_family_is_scraped_with_its_values() -> None:
    exporter = start_exporter(full_metrics(), port=0)
    try:
        text = _scrape(exporter.url)
    finally:
        exporter.close()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    names = {name for name, _ in samples}
    midrange = {n for n in names if n.startswith("midrange_")}
    # Every family is present (describe() is truthful) and nothing undeclared slipped in.
    assert registered_sample_names() - midrange == set()
    assert midrange - registered_sample_names() == set()
    assert samples[("midrange_actor_agent_steps_total", (("actor", "0"),))] == 256
    assert samples[("midrange_actor_physics_steps_total", (("actor", "1"),))] == 640
    assert samples[("midrange_policy_version", ())] == 7
    assert samples[("midrange_learner_loss", (("term", "value"),))] == pytest.approx(0.7)
    assert samples[("midrange_learner_loss", (("term", "total"),))] == pytest.approx(0.5)
    assert samples[("midrange_learner_stat", (("name", "value_clip_fraction"),))] == pytest.approx(0.02)
    assert samples[("midrange_episodes_total", (("actor", "0"), ("opponent", "pursuit"), ("outcome", "win")))] == 2
    assert samples[("midrange_episode_length_steps_count", (("opponent", "pursuit"),))] == 3
    assert samples[("midrange_ring_slots", (("state", "ready"),))] == 3
    assert samples[("midrange_ring_slot_reuses_total", ())] == 40
    assert samples[("midrange_overlap_ratio", ())] == pytest.approx(0.35)
    assert samples[("midrange_policy_lag_versions_bucket", (("le", "1.0"),))] == 2
    assert samples[("midrange_league_rating", (("player", "learner"),))] == 1530
    assert samples[("midrange_league_games_total", (("opponent", "crank"), ("outcome", "loss")))] == 5
    assert "process_cpu_seconds_total" in names  # standard process collector is served too


def test_cuda_series_on_this_host() -> None:
    text = exposition(full_metrics()).decode()
    line = next(x for x in text.splitlines() if x.startswith("midrange_cuda_memory_reserved_bytes{"))
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        assert 'device="cuda:0"' in line
    else:
        assert line == 'midrange_cuda_memory_reserved_bytes{device="none"} 0.0'


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_exposition_passes_promtool_check_metrics() -> None:
    text = exposition(full_metrics())
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


def test_busy_port_gives_a_clear_error() -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with pytest.raises(MetricsPortInUseError, match=rf"port {port} on 127.0.0.1 already in use.*--metrics-port"):
            start_exporter(Metrics(), port=port, rank=0, local_rank=0)


def test_port_fallback_takes_the_next_free_port_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        with caplog.at_level(logging.WARNING, logger="monitoring.exporter"):
            try:
                exporter = start_exporter(Metrics(), port=port, port_fallback=True, rank=0, local_rank=0)
            except MetricsPortInUseError:
                pytest.skip("the ports right above an ephemeral port were all busy")
        try:
            assert exporter.port > port and exporter.requested_port == port
            assert f"metrics port {port} on 127.0.0.1 is busy; exporting on 127.0.0.1:{exporter.port}" in caplog.text
            assert "midrange_build_info" in _scrape(exporter.url)
        finally:
            exporter.close()


def test_ranks_export_on_base_port_plus_local_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    base = _free_port()
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    try:
        exporter = start_exporter(Metrics(), port=base)
    except MetricsPortInUseError:
        pytest.skip(f"port {base + 1} happened to be busy")
    try:
        assert exporter.port == base + 1 and exporter.rank == 5
        info = next(x for x in _scrape(exporter.url).splitlines() if x.startswith("midrange_build_info"))
        assert re.search(r'rank="5"', info)
    finally:
        exporter.close()


def test_idle_connections_take_no_thread_each_and_a_scrape_still_answers() -> None:
    import threading

    exporter = start_exporter(full_metrics(), port=0)
    idle: list[socket.socket] = []
    try:
        before = threading.active_count()
        for _ in range(400):
            idle.append(socket.create_connection(("127.0.0.1", exporter.port), timeout=10))
        text = _scrape(exporter.url)  # answered while 400 connections (more than kept) sit idle
        assert "midrange_build_info" in text
        # The scrape may have started a worker; never one per connection.
        assert threading.active_count() <= before + WORKERS
        assert MAX_CONNECTIONS < 400
    finally:
        for conn in idle:
            conn.close()
        exporter.close()


@pytest.mark.slow
def test_a_half_sent_request_does_not_hold_the_server() -> None:
    exporter = start_exporter(full_metrics(), port=0)
    stalled = [socket.create_connection(("127.0.0.1", exporter.port), timeout=10) for _ in range(WORKERS)]
    try:
        for conn in stalled:
            conn.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest: each holds a worker
        # Every worker waits on a stalled request until its timeout, then a scrape is answered.
        with urllib.request.urlopen(exporter.url, timeout=60) as resp:
            assert b"midrange_build_info" in resp.read()
    finally:
        for conn in stalled:
            conn.close()
        exporter.close()


@pytest.mark.parametrize(("addr", "open_"), [("0.0.0.0", True), ("::", True), ("192.0.2.7", True),
                                             ("127.0.0.1", False), ("::1", False)])
def test_which_addresses_are_open_to_the_network(addr: str, open_: bool) -> None:
    assert open_to_network(addr) is open_


def test_an_address_not_of_this_machine_is_an_address_error() -> None:
    with pytest.raises(MetricsAddressError, match=r"^\[Errno \d+\] cannot listen on 192\.0\.2\.1: "
                                                  r"cannot assign requested address \(give an address"):
        start_exporter(Metrics(), addr="192.0.2.1", port=0)


def test_closing_releases_the_port() -> None:
    exporter = start_exporter(Metrics(), port=0)
    port = exporter.port
    exporter.close()
    again = start_exporter(Metrics(), port=port, rank=0, local_rank=0)
    again.close()


@pytest.mark.parametrize("port", [-1, 70000, "9400", True])
def test_bad_port(port) -> None:
    with pytest.raises(ValueError, match=r"metrics port must be an integer in 0\.\.65535"):
        start_exporter(Metrics(), port=port)


def test_bad_rank_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "one")
    with pytest.raises(ValueError, match="LOCAL_RANK must be an integer, got 'one'"):
        start_exporter(Metrics(), port=0)


def test_catalog_is_well_formed() -> None:
    names = [spec.name for spec in CATALOG]
    assert len(names) == len(set(names))
    for spec in CATALOG:
        assert spec.name.startswith("midrange_")
        assert spec.kind in ("counter", "gauge", "histogram", "info")
        assert not spec.name.endswith("_total"), "the _total suffix is added by the counter type"


def test_real_ring_is_exported_with_exact_accounting() -> None:
    from core.schema import RolloutSpec
    from pipeline.transport.ring import RolloutRing

    ring = RolloutRing(RolloutSpec(rollout_len=2, num_envs=3, obs_dim=4, action_dim=3), num_slots=2)
    m = Metrics()
    m.watch_ring(ring)
    for _ in range(3):  # the third chunk reuses a slot
        slot = ring.acquire_write(0)
        ring.commit(slot, policy_version=0)
        ring.release(ring.acquire_read(1))
    held = ring.acquire_write(1)  # one slot WRITING at scrape time
    values = {}
    for family in text_string_to_metric_families(exposition(m).decode()):
        for s in family.samples:
            values[(s.name, tuple(s.labels.values()))] = s.value
    stats = ring.stats()
    assert values[("midrange_ring_capacity_slots", ())] == 2
    assert values[("midrange_ring_slots", ("writing",))] == 1
    assert values[("midrange_ring_slots", ("free",))] == 1
    assert values[("midrange_ring_slot_reuses_total", ())] == stats.reuses >= 1
    assert values[("midrange_ring_produced_samples_total", ())] == 18
    assert values[("midrange_ring_consumed_samples_total", ())] == 18
    ring.abort(held)
