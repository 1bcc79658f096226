"""Sim actors in spawned processes (``actors.processes = on``), with real processes: weights
read across processes carry the version they were published with, runs balance their sample
accounting, a SIGKILLed actor process is restarted, a league runs, and nothing is left behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path

import pytest
import torch
from torch import nn

from monitoring import Metrics
from pipeline.config import ConfigError, resolve
from pipeline.config.flags import parse_config
from pipeline.launch import run
from pipeline.run.actor_process import ProcessActor
from pipeline.run.budget import Budget
from pipeline.run.hooks import ChunkOutcome, UpdateReport
from pipeline.run.intake import BatchIntake
from pipeline.run.loops import Run, drive
from pipeline.run.parts import build
from pipeline.run.scheduler import Scheduler
from pipeline.transport.weights import WeightPublisher


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 8)
        self.register_buffer("mean", torch.zeros(64))


LAST_VERSION = 400


def read_versions(publisher: WeightPublisher, conn) -> None:  # runs in a spawned process
    torch.set_num_threads(1)
    replica = Net()
    local, seen, errors = -1, [], []
    while local < LAST_VERSION:
        version = publisher.pull(replica, local)
        if version == local:
            continue
        values = {float(v) for t in replica.state_dict().values() for v in t.flatten().unique()}
        if values != {float(version)}:
            errors.append(f"version {version} holds {sorted(values)[:4]}")
        seen.append(version)
        local = version
    conn.send((seen, errors))


def test_weights_read_in_another_process_carry_their_version():
    torch.set_num_threads(1)
    learner = Net()
    publisher = WeightPublisher(learner, share=True)
    ctx = get_context("spawn")
    parent, child = ctx.Pipe()
    reader = ctx.Process(target=read_versions, args=(publisher, child), daemon=True)
    reader.start()
    for v in range(LAST_VERSION + 1):  # every version is uniform: v in every weight
        with torch.no_grad():
            for t in learner.state_dict().values():
                t.fill_(float(v))
        publisher.publish(learner, v)
    assert parent.poll(120), "the reader process did not finish"
    seen, errors = parent.recv()
    reader.join(10)
    assert not errors, errors[:5]
    assert seen == sorted(set(seen)) and seen[-1] == LAST_VERSION
    with pytest.raises(TypeError, match="share=True"):
        import pickle
        pickle.dumps(WeightPublisher(Net()))


def flags(tmp_path: Path, *extra: str) -> list[str]:
    return ["--actors", "2", "--envs-per-actor", "8", "--rollout-len", "4", "--opponent", "straight",
            "--reward", "outcome", "--device", "cpu", "--display", "none", "--metrics-port", "-1",
            "--run-dir", str(tmp_path / "run"), "--actor-processes", "on", "--set", "run.eval_episodes=0",
            "--set", "ppo.hidden_sizes=[16]", "--set", "ppo.update_epochs=1", *extra]


def children() -> set[int]:
    """Live processes whose parent is this one, but multiprocessing's resource tracker (started
    by the first spawned process, it stays for the life of the test process)."""
    return {pid for pid, state, cmdline in _processes_under(os.getpid())
            if state != "Z" and b"resource_tracker" not in cmdline}


def _processes_under(parent: int) -> Iterator[tuple[int, str, bytes]]:
    """(pid, state letter, command line) of each process whose parent is ``parent``."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent:
            yield int(stat.parent.name), fields[0], cmdline


def shm_entries() -> set[str]:
    shm = Path("/dev/shm")
    return {p.name for p in shm.iterdir() if f"_{os.getpid()}_" in p.name} if shm.is_dir() else set()


def test_config_refuses_processes_where_they_cannot_run(tmp_path):
    with pytest.raises(ConfigError, match=r"needs run\.device cpu"):
        resolve(parse_config(flags(tmp_path)), "cuda:0")  # the device as given: no GPU needed
    with pytest.raises(ConfigError, match="shared-memory ring"):
        resolve(parse_config(flags(tmp_path, "--ring", "device")), "cpu")
    with pytest.raises(ConfigError, match="stay threads"):
        resolve(parse_config(["--env", "gym:CartPole-v1", "--actor-processes", "on"]), "cpu")
    with pytest.raises(ConfigError, match=r"actors\.processes must be one of"):
        resolve(parse_config(["--set", "actors.processes=yes"]), "cpu")


def test_run_with_actor_processes_balances_and_leaves_nothing(tmp_path):
    before = children()
    shm_before = shm_entries()
    result = run(resolve(parse_config(flags(tmp_path, "--total-steps", "1024")), "cpu"))
    assert result.exit_code == 0
    s = result.ring
    assert s.produced_samples == s.consumed_samples + s.dropped_samples + s.in_flight_samples
    assert result.agent_steps >= 1024 and s.consumed_samples >= 1024
    assert result.win_history and result.win_history[-1][2] > 0  # episodes counted in this process
    assert 'processes = "on"' in (tmp_path / "run" / "config.toml").read_text()
    assert children() <= before
    assert shm_entries() <= shm_before


def niceness(pid: int) -> int:
    """A process's nice value, from /proc (field 19 of its stat line)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


@contextmanager
def actor_process_pids(config) -> Iterator[list[int]]:
    """The pids of the two actor processes of ``config``'s built run, closed afterwards."""
    parts = build(config, Metrics())
    try:
        pids = [actor.pid for actor in parts.actors if isinstance(actor, ProcessActor)]
        assert len(pids) == 2 and None not in pids
        yield [pid for pid in pids if pid is not None]
    finally:
        parts.close()


def test_actor_processes_run_below_the_learner_by_actors_nice(tmp_path):
    mine = niceness(os.getpid())
    config = resolve(parse_config(flags(tmp_path, "--total-steps", "64", "--set", "actors.nice=7")), "cpu")
    with actor_process_pids(config) as pids:
        assert [niceness(pid) for pid in pids] == [min(mine + 7, 19)] * 2
        assert niceness(os.getpid()) == mine  # the learner's process keeps its priority
    default = resolve(parse_config(flags(tmp_path)), "cpu")
    assert default.actors.nice == -1  # 0 for one process; a CPU torchrun job's ranks take 19
    with pytest.raises(ConfigError, match=r"actors\.nice"):
        resolve(parse_config(flags(tmp_path, "--set", "actors.nice=20")), "cpu")


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux's idle scheduling class")
def test_actor_processes_run_in_the_idle_class_by_actors_sched(tmp_path):
    mine = os.sched_getscheduler(0)
    config = resolve(parse_config(flags(tmp_path, "--total-steps", "64", "--set", "actors.sched=idle")), "cpu")
    with actor_process_pids(config) as pids:
        assert [os.sched_getscheduler(pid) for pid in pids] == [os.SCHED_IDLE] * 2
        assert os.sched_getscheduler(0) == mine != os.SCHED_IDLE  # the learner keeps its class
    normal = resolve(parse_config(flags(tmp_path, "--total-steps", "64")), "cpu")
    assert normal.actors.sched == "auto"  # normal for one process; a CPU torchrun job's ranks: idle
    with actor_process_pids(normal) as pids:
        assert {os.sched_getscheduler(pid) for pid in pids} == {mine}
    with pytest.raises(ConfigError, match=r"actors\.sched must be one of auto, normal, idle, got 'lowest'"):
        resolve(parse_config(flags(tmp_path, "--set", "actors.sched=lowest")), "cpu")


class Hooks:
    """The run's hooks, keeping what the loops report; a failure is counted, not fatal."""

    def __init__(self, kill_after_first_chunk: ProcessActor):
        self.victim = kill_after_first_chunk
        self.chunks: list[ChunkOutcome] = []
        self.failures: list[BaseException] = []
        self.killed = False

    def on_chunk(self, outcome: ChunkOutcome) -> None:
        self.chunks.append(outcome)
        if not self.killed and self.victim.pid is not None:
            os.kill(self.victim.pid, signal.SIGKILL)  # mid-way through its next chunk, or before it
            self.killed = True

    def on_update(self, report: UpdateReport) -> None:
        pass

    def on_busy(self, role: str, start: float, end: float) -> None:
        pass

    def on_actor_failure(self, actor_id: int, exc: BaseException, dropped_chunk: bool) -> None:
        self.failures.append(exc)

    def on_interrupted_chunk(self) -> None:
        pass


def test_sigkilled_actor_process_is_restarted_and_accounting_balances(tmp_path):
    before = children()
    config = resolve(parse_config(flags(tmp_path, "--total-steps", "768")), "cpu")
    parts = build(config, Metrics())
    try:
        victim = parts.actors[0]
        assert isinstance(victim, ProcessActor)
        old_pid = victim.pid
        hooks = Hooks(victim)
        chunks = -(-config.run.total_steps // config.samples_per_chunk)
        the_run = Run(parts, BatchIntake(parts, Metrics()), Budget(chunks), Scheduler(hooks, False, 1), hooks)
        asyncio.run(drive(the_run, lambda: None, 60.0))
        assert len(hooks.failures) == 1 and "killed by SIGKILL" in str(hooks.failures[0])
        assert parts.actors[0].pid != old_pid and parts.incarnations[0] == 1
        assert len(hooks.chunks) == chunks  # the lost chunk was produced again
        s = parts.ring.stats()
        assert s.produced_samples == s.consumed_samples + s.dropped_samples + s.in_flight_samples
        assert s.in_flight_samples == 0
    finally:
        parts.close()
    assert children() <= before


@pytest.mark.slow
def test_league_with_actor_processes_sync(tmp_path):
    before = children()
    result = run(resolve(parse_config(flags(
        tmp_path, "--opponent", "league", "--sync", "--total-steps", "2048",
        "--set", "league.groups_per_actor=2", "--set", "league.hold_chunks=2",
        "--set", "league.snapshot_every=4", "--set", 'league.anchors=["straight", "random"]',
        "--set", "league.latest=0.25")), "cpu"))
    assert result.exit_code == 0 and result.failures == 0
    s = result.ring
    assert s.produced_samples == s.consumed_samples + s.dropped_samples + s.in_flight_samples
    league = json.loads((tmp_path / "run" / "league" / "league.json").read_text())
    assert league["snapshots"]  # snapshots joined the pool
    played = [n for n, r in league["records"].items() if r["wins"] + r["draws"] + r["losses"]]
    assert len(played) >= 2, league["records"]  # results came back per group, credited per opponent
    assert children() <= before


@pytest.mark.slow
def test_an_actor_process_plays_its_own_replica_as_the_latest_self(tmp_path):
    """The mirror sends "latest" (not weights) for each new draw of the latest self, and the
    process copies its own replica of the learning policy into the group's policy slot."""
    from learner import ActorCritic
    from pipeline.league.matchmaking import LATEST, POLICY, League
    from pipeline.run.actor_process_child import _apply_league
    from pipeline.run.sim_actors import make_sim_actor
    from sim import ObsLayout

    config = resolve(parse_config(flags(
        tmp_path, "--opponent", "league", "--set", "league.groups_per_actor=2",
        "--set", "league.hold_chunks=1", "--set", "league.latest=1.0")), "cpu")
    parts = build(config, Metrics(), tmp_path / "run")
    try:
        mirror, league = parts.actors[0], parts.league
        assert isinstance(mirror, ProcessActor) and league is not None
        league.before_chunk(mirror)
        changes = mirror._league_changes()
        assert changes is not None and changes[0] == [[POLICY, LATEST], [POLICY, LATEST]]
        league.before_chunk(mirror)  # the groups drain (nothing has ended): no new draw
        assert mirror._league_changes()[0] == [None, None]
    finally:
        parts.close()
    layout = ObsLayout.from_config(config.sim)
    policy = ActorCritic(layout.size, parts.learner.policy.action_spec, config.ppo.hidden_sizes)
    with torch.no_grad():
        for p in policy.parameters():
            p.normal_()
    in_process = make_sim_actor(config, layout, torch.device("cpu"), 0, 0, policy,
                                League(config.league, tmp_path, 0, lambda: ActorCritic(
                                    layout.size, policy.action_spec, config.ppo.hidden_sizes)))
    _apply_league(in_process, changes)
    for g in range(2):
        slot = in_process.opponent.candidates[g][POLICY].policy
        assert in_process.opponent.current[g] == POLICY and slot is not policy
        for a, b in zip(slot.state_dict().values(), policy.state_dict().values(), strict=True):
            assert torch.equal(a, b)


@pytest.mark.slow
def test_async_league_sends_snapshots_larger_than_the_pipe_buffer(tmp_path):
    """A snapshot's weights (here about 1.4 MB, beyond a socket's buffer) reach the actor
    processes through the event loop's pipes without an actor failing half-way through a send."""
    result = run(resolve(parse_config(flags(
        tmp_path, "--opponent", "league", "--total-steps", "4096", "--set", "ppo.hidden_sizes=[384, 384]",
        "--set", "league.groups_per_actor=2", "--set", "league.hold_chunks=1",
        "--set", "league.snapshot_every=2", "--set", "league.self_play=1.0",
        "--set", 'league.anchors=["straight"]', "--set", "run.max_actor_failures=1")), "cpu"))
    assert result.exit_code == 0 and result.failures == 0
    league = json.loads((tmp_path / "run" / "league" / "league.json").read_text())
    assert len(league["records"]) > 1, league["records"]  # snapshots were drawn, so sent to the actors


@pytest.mark.slow
def test_sigterm_stops_a_launch_and_leaves_no_actor_process(tmp_path):
    import subprocess
    import sys
    import time

    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.launch",
                             *flags(tmp_path, "--total-steps", "10000000", "--display", "plain",
                                    "--set", "run.compile_step=false", "--set", "run.compile_agents=false")],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log = tmp_path / "run" / "run.log"
        deadline = time.monotonic() + 120
        actors: set[int] = set()
        while time.monotonic() < deadline and proc.poll() is None:
            actors = _children_of(proc.pid)
            if len(actors) == 2 and log.exists() and log.stat().st_size > 0:
                break
            time.sleep(0.1)
        assert len(actors) == 2, "the actor processes did not start"
        time.sleep(1.0)  # training under way
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "stopping: received SIGTERM" in out, out
    line = next(x for x in out.splitlines() if x.startswith("samples: produced"))
    produced, consumed, dropped, in_flight = _accounting(line)
    assert produced == consumed + dropped + in_flight, line
    time.sleep(0.5)
    assert not [pid for pid in actors if _alive(pid)], "an actor process outlived the run"


def _children_of(parent: int) -> set[int]:
    """Spawned multiprocessing children of ``parent`` (its resource tracker left out)."""
    return {pid for pid, _, cmdline in _processes_under(parent) if b"spawn_main" in cmdline}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _accounting(line: str) -> tuple[int, int, int, int]:
    import re

    m = re.search(r"produced (\d+) = consumed (\d+) \+ dropped (\d+) \+ in flight (\d+)", line)
    assert m is not None, line
    a, b, c, d = (int(x) for x in m.groups())
    return a, b, c, d


@pytest.mark.slow
def test_compiled_actor_processes_leave_no_semaphore_behind(tmp_path):
    # torch.compile in an actor process creates a named semaphore (tqdm's lock); the process ends
    # with os._exit, so unless it runs its exit finalizers the resource tracker warns at the end.
    argv = [sys.executable, "-m", "pipeline.launch", *flags(tmp_path, "--total-steps", "2048"),
            "--set", "run.compile_step=true", "--set", "run.compile_agents=true"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)  # a hang guard only
    assert done.returncode == 0, done.stderr[-3000:]
    assert "leaked semaphore" not in done.stderr, done.stderr[-3000:]
    assert "compile" in (tmp_path / "run" / "config.toml").read_text()
