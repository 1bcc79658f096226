"""``python -m pipeline.launch`` under ``torchrun``: one job of several ranks, each with its own
actors and a learner replica, on gloo CPU ranks of this host (two ranks of one agent, and two
agents as two machines). Failures of a rank: tests/test_torchrun_faults.py."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import torch

from learner.checkpoint import load_policy
from pipeline.config import ConfigError, resolve
from pipeline.config.flags import parse_config
from pipeline.run.parts import actor_seed
from pipeline.run.ranks import JOB_ACTOR_NICE, Job, rank_seed
from tests.torchrun_harness import TINY, agent_steps, finish, launch, two_machines


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
    out = finish(launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch", *TINY,
                          "--total-steps", "4096", "--run-dir", str(run_dir)))
    _check_job(run_dir, out, 4096)


@pytest.mark.slow
def test_two_ranks_train_a_gymnasium_env(tmp_path):
    run_dir = tmp_path / "run"
    out = finish(launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch", *TINY,
                          "--env", "gym:CartPole-v1", "--total-steps", "4096", "--run-dir", str(run_dir)))
    _check_job(run_dir, out, 4096)


@pytest.mark.slow
def test_two_machines_simulated_on_one_host(tmp_path):
    # Each machine its own working directory, so the relative --run-dir is a directory of
    # its own on each: nothing of the job crosses but the process group.
    machines = [tmp_path / "machine0", tmp_path / "machine1"]
    for machine in machines:
        machine.mkdir()
    args = [*TINY, "--total-steps", "4096", "--run-dir", "run"]
    outs = two_machines([args, args], cwds=machines)
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
    outs = two_machines([[*TINY, "--total-steps", "4096", "--run-dir", "run"]] * 2, cwds=machines)
    holder = next(i for i, o in enumerate(outs) if "job of 2 ranks" in o)
    assert [p.name for p in (machines[1 - holder] / "run").iterdir()] == ["run.rank1.log"]
    resume = ["--resume", "run", "--total-steps", "8192"]
    outs = two_machines([resume, resume], cwds=machines)
    first = next(i for i, o in enumerate(outs) if "job of 2 ranks" in o)
    out = outs[first]
    assert "resumed at 4,096" in out, out[-4000:]
    assert "job of 2 ranks: 4,096 agent-steps trained" in out and "learner replicas: identical on every rank" in out
    # Rank 0 continued the run in its own --run-dir, from the checkpoint of 4,096 agent-steps.
    checkpoint = machines[first] / "run" / "checkpoints" / "latest.pt"
    assert agent_steps(checkpoint) == 8192
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    assert state["policy_version"] > 0
    assert list((tmp_path / "tmp").glob("midrange-resume-*")) == []  # the copy is gone
