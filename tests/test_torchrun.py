"""``python -m pipeline.launch`` under ``torchrun``: one job of several ranks, each with its own
actors and a learner replica, on gloo CPU ranks of this host (two ranks of one agent, and two
agents as two machines)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learner.checkpoint import load_policy
from pipeline.config import ConfigError, resolve
from pipeline.config.flags import parse_config
from pipeline.run.parts import actor_seed
from pipeline.run.ranks import JOB_ACTOR_NICE, TIMEOUT_VARIABLE, Job, rank_seed

REPO = Path(__file__).resolve().parents[1]
TINY = ["--actors", "1", "--envs-per-actor", "16", "--display", "plain", "--metrics-port", "-1",
        "--set", "run.eval_episodes=0", "--set", "actors.processes=off"]
"""Each rank: one actor thread on 16 envs (a chunk is 256 agent-steps), no evaluation."""


def _launch(*args: str, pythonpath: str = str(REPO), timeout_s: str = "", cwd: Path = REPO) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1")
    if timeout_s:
        env[TIMEOUT_VARIABLE] = timeout_s
    # Own process group: a hang is killed with every rank, leaving no orphans.
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen[str], timeout: float = 420) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)  # a hang guard, not a timing bound
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"torchrun did not finish:\n{out[-6000:]}") from None
    assert proc.returncode == 0, out[-6000:]
    return out


def _digest(policy: torch.nn.Module) -> str:
    params = torch.nn.utils.parameters_to_vector(policy.parameters()).detach().to("cpu", torch.float32)
    return hashlib.sha256(params.numpy().tobytes()).hexdigest()[:16]


def _check_job(run_dir: Path, out: str, total: int, rank1_dir: Path | None = None) -> None:
    """Rank 0 alone wrote the run directory (rank 1 only its log, in ``rank1_dir`` on another
    machine); the job trained ``total`` agent-steps, half on each rank, with exact sample
    accounting; both replicas ended equal to the checkpoint."""
    league_dir = ["league"] if "opponent league" in out else []
    rank1_dir = run_dir if rank1_dir is None else rank1_dir
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(
        ["checkpoints", "config.toml", *league_dir, "progress.csv", "run.log"]
        + (["run.rank1.log"] if rank1_dir == run_dir else []))
    assert [p.name for p in rank1_dir.iterdir()] == ["run.rank1.log"] or rank1_dir == run_dir
    assert "# job: world size 2" in (run_dir / "config.toml").read_text()
    job = re.search(r"job of 2 ranks: ([\d,]+) agent-steps trained; samples: produced (\d+) = "
                    r"consumed (\d+) \+ dropped (\d+) \+ in flight (\d+)", out)
    assert job is not None, out[-4000:]
    trained, produced, consumed, dropped, in_flight = (int(g.replace(",", "")) for g in job.groups())
    assert trained == total and produced == consumed + dropped + in_flight and consumed == total
    shares = re.findall(r"rank (\d): ([\d,]+) agent-steps trained \(50%\), produced (\d+) = consumed "
                        r"(\d+) \+ dropped (\d+) \+ in flight (\d+), (\d+) updates, weights (\w+)", out)
    assert [s[0] for s in shares] == ["0", "1"], out[-4000:]
    assert all(int(s[1].replace(",", "")) == total // 2 == int(s[3]) for s in shares)
    assert "learner replicas: identical on every rank" in out
    checkpoint = run_dir / "checkpoints" / "latest.pt"
    assert {s[7] for s in shares} == {_digest(load_policy(checkpoint, device="cpu"))}
    extra = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert extra["extra"]["agent_steps"] == total
    # Rank 1 kept its own record of the same job.
    assert "learner replicas: identical on every rank" in (rank1_dir / "run.rank1.log").read_text()
    if not league_dir:
        return
    # One league: the records rank 0 saved hold every rank's games.
    league = re.search(r"league: ([\d,]+) games in the records, every rank's \(rank 0 ([\d,]+), "
                       r"rank 1 ([\d,]+)\); exchanged in (\d+) update agreements, by name in (\d+)", out)
    assert league is not None, out[-4000:]
    games, *per_rank, packed, by_name = (int(g.replace(",", "")) for g in league.groups())
    assert games == sum(per_rank) and min(per_rank) > 0
    # The ranks' pools agree at every update, so the games always rode in the agreement's sum.
    assert packed > 0 and by_name == 0
    records = json.loads((run_dir / "league" / "league.json").read_text())["records"].values()
    assert sum(r["wins"] + r["draws"] + r["losses"] for r in records) == games


def test_each_rank_collects_its_own_data_and_trains_its_share():
    config = resolve(parse_config(["--total-steps", "10000", "--envs-per-actor", "16", "--device", "cpu"]))
    one = Job(rank=0, world_size=2)
    job = one.job_config(config)
    # Each update trains one batch of each rank: the job's updates are half a single process's.
    assert job.ppo.total_updates == -(-10000 // (2 * config.samples_per_batch))
    zero, first = one.rank_config(job), Job(rank=1, world_size=2).rank_config(job)
    assert zero.run.seed == config.run.seed and first.run.seed == rank_seed(config.run.seed, 1)
    seeds = [{actor_seed(c.run.seed, a, i) for a in range(8) for i in range(4)} for c in (zero, first)]
    assert not seeds[0] & seeds[1]
    assert first.run.display == "none" and first.run.eval_episodes == 0 and zero.run.display == job.run.display
    # On a CPU a rank's actor processes run below its learner, unless the config says otherwise.
    assert config.actors.nice == -1 and zero.actors.nice == first.actors.nice == JOB_ACTOR_NICE == 19
    chosen = resolve(parse_config(["--total-steps", "10000", "--device", "cpu", "--set", "actors.nice=0"]))
    assert one.rank_config(one.job_config(chosen)).actors.nice == 0
    # ... in Linux's idle class, so a waking learner takes the core back at once.
    assert config.actors.sched == "auto" and zero.actors.sched == first.actors.sched == "idle"
    normal = resolve(parse_config(["--total-steps", "10000", "--device", "cpu", "--set", "actors.sched=normal"]))
    assert one.rank_config(one.job_config(normal)).actors.sched == "normal"
    assert [Job(r, 3).share_of_chunks(10) for r in range(3)] == [4, 4, 4]
    assert Job().rank_config(config) is config and Job().job_config(config) is config
    small = resolve(parse_config(["--total-steps", "256", "--envs-per-actor", "16", "--device", "cpu"]))
    with pytest.raises(ConfigError, match=r"run.total_steps 256 is 1 chunk\(s\) of 256 agent-steps, fewer than the job's 2 ranks"):
        one.job_config(small)


@pytest.mark.slow
def test_two_ranks_train_one_job_to_the_end(tmp_path):
    run_dir = tmp_path / "run"
    out = _finish(_launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch", *TINY,
                          "--total-steps", "4096", "--run-dir", str(run_dir)))
    _check_job(run_dir, out, 4096)


@pytest.mark.slow
def test_two_ranks_train_a_gymnasium_env(tmp_path):
    run_dir = tmp_path / "run"
    out = _finish(_launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch", *TINY,
                          "--env", "gym:CartPole-v1", "--total-steps", "4096", "--run-dir", str(run_dir)))
    _check_job(run_dir, out, 4096)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _two_machines(args: list[list[str]], pythonpath: list[str] | None = None,
                  exit_code: int = 0, cwds: list[Path] | None = None) -> list[str]:
    """Two ``torchrun`` agents as two machines of one rank each (c10d rendezvous on
    127.0.0.1), running ``pipeline.launch`` with ``args[node]`` in ``cwds[node]``; their
    outputs."""
    port = _free_port()
    agents = [
        _launch("--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-id", f"midrange-{port}", "--master-addr", "127.0.0.1", "--max-restarts", "0",
                "-m", "pipeline.launch", *args[node], pythonpath=(pythonpath or [str(REPO)] * 2)[node],
                cwd=(cwds or [REPO] * 2)[node])
        for node in (0, 1)]
    try:
        outs = []
        for agent in agents:
            try:
                out, _ = agent.communicate(timeout=420)  # a hang guard, not a timing bound
            except subprocess.TimeoutExpired:
                raise AssertionError("a torchrun agent did not finish") from None
            assert (agent.returncode == 0) == (exit_code == 0), out[-6000:]
            outs.append(out)
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.communicate()
    return outs


@pytest.mark.slow
def test_two_machines_simulated_on_one_host(tmp_path):
    # Each machine its own working directory, so the relative --run-dir is a directory of
    # its own on each: nothing of the job crosses but the process group.
    machines = [tmp_path / "machine0", tmp_path / "machine1"]
    for machine in machines:
        machine.mkdir()
    args = [*TINY, "--total-steps", "4096", "--run-dir", "run"]
    outs = _two_machines([args, args], cwds=machines)
    # The rendezvous decides which machine runs rank 0; it printed the job's summary.
    first = next(i for i, o in enumerate(outs) if "job of 2 ranks" in o)
    _check_job(machines[first] / "run", outs[first], 4096, rank1_dir=machines[1 - first] / "run")


@pytest.mark.slow
def test_a_job_resumed_on_two_machines_that_share_no_files(tmp_path, monkeypatch):
    # The first job leaves its run on the machine of rank 0 alone; --resume on both machines
    # continues it: the rank whose machine lacks the run gets it from the one that holds it.
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # where a rank keeps its copy
    (tmp_path / "tmp").mkdir()
    machines = [tmp_path / "machine0", tmp_path / "machine1"]
    for machine in machines:
        machine.mkdir()
    outs = _two_machines([[*TINY, "--total-steps", "4096", "--run-dir", "run"]] * 2, cwds=machines)
    holder = next(i for i, o in enumerate(outs) if "job of 2 ranks" in o)
    assert [p.name for p in (machines[1 - holder] / "run").iterdir()] == ["run.rank1.log"]
    resume = ["--resume", "run", "--total-steps", "8192"]
    outs = _two_machines([resume, resume], cwds=machines)
    first = next(i for i, o in enumerate(outs) if "job of 2 ranks" in o)
    out = outs[first]
    assert "resumed at 4,096" in out, out[-4000:]
    assert "job of 2 ranks: 4,096 agent-steps trained" in out and "learner replicas: identical on every rank" in out
    # Rank 0 continued the run in its own --run-dir, from the checkpoint of 4,096 agent-steps.
    checkpoint = machines[first] / "run" / "checkpoints" / "latest.pt"
    assert _agent_steps(checkpoint) == 8192
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert state["policy_version"] > 0
    assert list((tmp_path / "tmp").glob("midrange-resume-*")) == []  # the copy is gone


def _rank_pid(agent: subprocess.Popen[str], rank: int) -> int | None:
    """The pid of the worker of ``agent`` that runs ``rank`` (None when there is none now)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            environ = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # gone while we looked
        if ppid == agent.pid and f"RANK={rank}".encode() in environ:
            return int(proc.name)
    return None


def _wait_for_checkpoint(agent: subprocess.Popen[str], run_dir: Path) -> None:
    """Wait (hang guard: the agent's own end) until the job wrote a periodic checkpoint."""
    while not list((run_dir / "checkpoints").glob("ckpt_*.pt")):
        try:
            agent.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"the job ended before its first checkpoint:\n{agent.communicate()[0][-4000:]}")


def _agent_steps(checkpoint: Path) -> int:
    return int(torch.load(checkpoint, map_location="cpu", weights_only=False)["extra"]["agent_steps"])


@pytest.mark.slow
def test_a_killed_rank_restarts_the_job_from_its_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    agent = _launch("--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "-m", "pipeline.launch",
                    *TINY, "--total-steps", "16384", "--run-dir", str(run_dir),
                    "--set", "run.checkpoint_interval_s=0.5")
    try:
        _wait_for_checkpoint(agent, run_dir)
        pid = _rank_pid(agent, 1)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        out = _finish(agent)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    # The job was restarted once, continued the checkpoint and trained its whole budget.
    resumed = re.search(r"resumed at ([\d,]+)", out)
    assert resumed is not None, out[-4000:]
    before = int(resumed.group(1).replace(",", ""))
    assert 0 < before < 16384
    assert "learner replicas: identical on every rank" in out
    assert _agent_steps(run_dir / "checkpoints" / "latest.pt") == 16384
    assert f"job of 2 ranks: {16384 - before:,} agent-steps trained" in out


@pytest.mark.slow
def test_a_hung_rank_fails_the_job_after_the_collective_timeout(tmp_path):
    run_dir = tmp_path / "run"
    agent = _launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch", *TINY,
                    "--total-steps", "16384", "--run-dir", str(run_dir), "--set", "run.checkpoint_interval_s=0.5",
                    timeout_s="10")
    try:
        _wait_for_checkpoint(agent, run_dir)
        pid = _rank_pid(agent, 1)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # alive, holding its connections, answering nothing
        out, _ = agent.communicate(timeout=300)  # a hang guard, not a timing bound
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    assert agent.returncode != 0
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Timed out waiting 10000ms" in errors[0], out[-4000:]
    assert "job: rank 0 failed; the ranks' shares were not gathered" in out
    # Rank 0 still wrote its summary and a loadable checkpoint.
    load_policy(run_dir / "checkpoints" / "latest.pt", device="cpu")
    assert re.search(r"^checkpoint: .*ckpt_\d+\.pt$", out, re.MULTILINE)


@pytest.mark.slow
def test_sigterm_to_torchrun_stops_every_rank_with_one_checkpoint_and_resume_continues(tmp_path):
    run_dir = tmp_path / "run"
    agent = _launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch", *TINY,
                    "--total-steps", "16384", "--run-dir", str(run_dir), "--set", "run.checkpoint_interval_s=0.5")
    try:
        _wait_for_checkpoint(agent, run_dir)
        agent.send_signal(signal.SIGTERM)
        out, _ = agent.communicate(timeout=300)  # a hang guard, not a timing bound
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    # torchrun itself exits 1 on a signal; every rank stopped cleanly after the same update.
    assert out.count("stopping: received SIGTERM") == 1 and "learner replicas: identical on every rank" in out
    stopped = _agent_steps(run_dir / "checkpoints" / "latest.pt")
    assert re.search(rf"job of 2 ranks: {stopped:,} agent-steps trained", out), out[-4000:]
    out = _finish(_launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch",
                          "--resume", str(run_dir), "--metrics-port", "-1"))
    assert f"resumed at {stopped:,}" in out
    assert _agent_steps(run_dir / "checkpoints" / "latest.pt") == 16384
    assert f"job of 2 ranks: {16384 - stopped:,} agent-steps trained" in out


def _errors(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("error: ")]


@pytest.mark.slow
def test_ranks_started_with_different_options_are_refused_on_every_rank(tmp_path):
    run_dir = tmp_path / "run"
    args = [*TINY, "--run-dir", str(run_dir)]
    outs = _two_machines([[*args, "--total-steps", "4096"], [*args, "--total-steps", "8192"]], exit_code=2)
    for out in outs:
        errors = _errors(out)
        assert len(errors) == 1 and "was started with another config than rank 0" in errors[0], out[-4000:]
        assert "total_steps" in errors[0] and "exitcode  : 2" in out
    assert not run_dir.exists()


@pytest.mark.slow
def test_a_rank_that_cannot_start_stops_every_rank_with_its_error(tmp_path):
    # A plug-in installed on one machine only.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "tr_opponent.py").write_text("from agents.scripted import StraightAgent as Plain\n")
    run_dir = tmp_path / "run"
    args = [*TINY, "--total-steps", "4096", "--run-dir", str(run_dir), "--opponent", "tr_opponent:Plain"]
    outs = _two_machines([args, args], pythonpath=[f"{REPO}{os.pathsep}{plugins}", str(REPO)], exit_code=2)
    for out in outs:
        errors = _errors(out)
        assert len(errors) == 1 and "tr_opponent" in errors[0], out[-4000:]
        assert "exitcode  : 2" in out and "exitcode  : -" not in out
    assert any(" could not start: " in _errors(out)[0] for out in outs)
    assert not run_dir.exists()


def _two_leagues(tmp_path: Path, anchors: list[list[str]]) -> list:
    from pipeline.config import LeagueConfig
    from pipeline.league.matchmaking import League

    return [League(LeagueConfig(anchors=a), tmp_path / f"league{r}", 0, lambda: torch.nn.Linear(1, 1))
            for r, a in enumerate(anchors)]


def _between_two_threads():
    """An all-gather and an all-reduce (sum) between two threads, each called once per rank."""
    from threading import Barrier

    posted: list = [None, None]
    meet = Barrier(2)

    def gather(rank: int, own):
        posted[rank] = own
        meet.wait()
        out = list(posted)
        meet.wait()
        return out

    def reduce(rank: int, vector: list[int]) -> list[int]:
        both = gather(rank, vector)
        return [a + b for a, b in zip(*both, strict=True)]

    return gather, reduce


def _agree(sides, gather, reduce) -> list[bool]:
    """What Job.agree_to_update does with the league's games, on two threads: the packed
    results summed, and the all-gather where the ranks' names differ."""
    from concurrent.futures import ThreadPoolExecutor

    def one(rank: int) -> bool:
        side = sides[rank]
        packed = side.pack()
        if side.unpack(packed, reduce(rank, packed.vector), 2):
            return True
        side.exchange(lambda own: gather(rank, own))
        return False

    with ThreadPoolExecutor(2) as pool:
        return [f.result() for f in [pool.submit(one, r) for r in range(2)]]


def test_ranks_exchange_their_league_games_once_each(tmp_path):
    from pipeline.run.rank_league import LeagueResults

    leagues = _two_leagues(tmp_path, [["crank", "random"]] * 2)
    sides = [LeagueResults(league, rank) for rank, league in enumerate(leagues)]
    gather, reduce = _between_two_threads()
    leagues[0].records["crank"].add(3, 1, 2, window=500)
    leagues[1].records["crank"].add(1, 0, 0, window=500)
    leagues[1].records["random"].add(0, 0, 4, window=500)
    assert _agree(sides, gather, reduce) == [True, True]  # the same pool: summed in the agreement
    assert _agree(sides, gather, reduce) == [True, True]  # nothing new: nothing counted twice
    leagues[1].records["random"].add(2, 0, 0, window=500)
    assert _agree(sides, gather, reduce) == [True, True]
    assert [(side.packed, side.by_name) for side in sides] == [(3, 0), (3, 0)]
    for league in leagues:
        crank, rand = league.records["crank"], league.records["random"]
        assert (crank.wins, crank.draws, crank.losses) == (4, 1, 2)
        assert (rand.wins, rand.draws, rand.losses) == (2, 0, 4)
    assert [side.own_games for side in sides] == [6, 7] and sides[0].games() == sides[1].games() == 13
    assert len(sides[0].pack().vector) == 3 + 3 * (2 + leagues[0].config.max_snapshots)


def test_ranks_whose_pools_differ_exchange_their_games_by_name(tmp_path):
    # The slots would mean different opponents on the two ranks: every rank sees it in the sums
    # and both take the all-gather by name; a game against an opponent only one rank has stays there.
    from pipeline.run.rank_league import LeagueResults

    leagues = _two_leagues(tmp_path, [["crank", "random"], ["crank", "shooter"]])
    sides = [LeagueResults(league, rank) for rank, league in enumerate(leagues)]
    gather, reduce = _between_two_threads()
    leagues[0].records["crank"].add(1, 2, 3, window=500)
    leagues[0].records["random"].add(5, 0, 0, window=500)
    leagues[1].records["crank"].add(4, 0, 0, window=500)
    leagues[1].records["shooter"].add(0, 1, 0, window=500)
    assert _agree(sides, gather, reduce) == [False, False]
    assert _agree(sides, gather, reduce) == [False, False]  # nothing counted twice this way either
    crank = [(r.wins, r.draws, r.losses) for r in (league.records["crank"] for league in leagues)]
    assert crank == [(5, 2, 3), (5, 2, 3)]
    assert (leagues[0].records["random"].wins, leagues[1].records["shooter"].draws) == (5, 1)
    assert [side.own_games for side in sides] == [11, 5]
    assert [(side.packed, side.by_name) for side in sides] == [(0, 2), (0, 2)]
