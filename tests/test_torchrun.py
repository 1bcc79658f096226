"""``python -m pipeline.launch`` under ``torchrun``: one job of several ranks, each with its own
actors and a learner replica, on gloo CPU ranks of this host (two ranks of one agent, and two
agents as two machines)."""

from __future__ import annotations

import hashlib
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
from pipeline.config import resolve
from pipeline.config.flags import parse_config
from pipeline.run.parts import actor_seed
from pipeline.run.ranks import Job, rank_seed

REPO = Path(__file__).resolve().parents[1]
TINY = ["--actors", "1", "--envs-per-actor", "16", "--display", "plain", "--metrics-port", "-1",
        "--set", "run.eval_episodes=0", "--set", "actors.processes=off"]
"""Each rank: one actor thread on 16 envs (a chunk is 256 agent-steps), no evaluation."""


def _launch(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    # Own process group: a hang is killed with every rank, leaving no orphans.
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *args], cwd=REPO, env=env,
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


def _check_job(run_dir: Path, out: str, total: int) -> None:
    """Rank 0 alone wrote the run directory; the job trained ``total`` agent-steps, half on each
    rank, with exact sample accounting; both replicas ended equal to the checkpoint."""
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoints", "config.toml", "league", "progress.csv", "run.log", "run.rank1.log"]
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
    assert "learner replicas: identical on every rank" in (run_dir / "run.rank1.log").read_text()


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
    assert [Job(r, 3).share_of_chunks(10) for r in range(3)] == [4, 4, 4]
    assert Job().rank_config(config) is config and Job().job_config(config) is config


@pytest.mark.slow
def test_two_ranks_train_one_job_to_the_end(tmp_path):
    run_dir = tmp_path / "run"
    out = _finish(_launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch", *TINY,
                          "--total-steps", "2048", "--run-dir", str(run_dir)))
    _check_job(run_dir, out, 2048)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_two_machines_simulated_on_one_host(tmp_path):
    run_dir = tmp_path / "run"
    port = _free_port()
    agents = [
        _launch("--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-id", f"midrange-{port}", "--master-addr", "127.0.0.1", "--max-restarts", "0",
                "-m", "pipeline.launch", *TINY, "--total-steps", "2048", "--run-dir", str(run_dir))
        for node in (0, 1)]
    try:
        outs = [_finish(agent) for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
    # The node whose agent placed rank 0 printed the job's summary.
    out = next((o for o in outs if "job of 2 ranks" in o), outs[0])
    _check_job(run_dir, out, 2048)
