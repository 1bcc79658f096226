"""A rank of a ``torchrun`` job that dies, hangs, is stopped, disagrees or cannot start: the job
restarts from its checkpoint, fails with one clear error, or stops every rank cleanly."""

from __future__ import annotations

import os
import re
import signal

import pytest

from learner.checkpoint import load_policy
from tests.torchrun_harness import (
    REPO,
    TINY,
    agent_steps,
    error_lines,
    finish,
    launch,
    rank_pid,
    two_machines,
    wait_for_checkpoint,
)


@pytest.mark.slow
def test_a_killed_rank_restarts_the_job_from_its_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    agent = launch("--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "-m", "pipeline.launch",
                    *TINY, "--total-steps", "16384", "--run-dir", str(run_dir),
                    "--set", "run.checkpoint_interval_s=0.5")
    try:
        wait_for_checkpoint(agent, run_dir)
        pid = rank_pid(agent, 1)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        out = finish(agent)
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    # The job was restarted once, continued the checkpoint and trained its whole budget.
    resumed = re.search(r"resumed at ([\d,]+)", out)
    assert resumed is not None, out[-4000:]
    before = int(resumed.group(1).replace(",", ""))
    assert 0 < before < 16384
    assert "learner replicas: identical on every rank" in out
    assert agent_steps(run_dir / "checkpoints" / "latest.pt") == 16384
    assert f"job of 2 ranks: {16384 - before:,} agent-steps trained" in out


@pytest.mark.slow
def test_a_hung_rank_fails_the_job_after_the_collective_timeout(tmp_path):
    run_dir = tmp_path / "run"
    agent = launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch", *TINY,
                    "--total-steps", "16384", "--run-dir", str(run_dir), "--set", "run.checkpoint_interval_s=0.5",
                    timeout_s="10")
    try:
        wait_for_checkpoint(agent, run_dir)
        pid = rank_pid(agent, 1)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # alive, holding its connections, answering nothing
        out, _ = agent.communicate(timeout=300)  # a hang guard, not a timing bound
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    assert agent.returncode != 0
    errors = error_lines(out)
    assert len(errors) == 1 and "Timed out waiting 10000ms" in errors[0], out[-4000:]
    assert "job: rank 0 failed; the ranks' shares were not gathered" in out
    # Rank 0 still wrote its summary and a loadable checkpoint.
    load_policy(run_dir / "checkpoints" / "latest.pt", device="cpu")
    assert re.search(r"^checkpoint: .*ckpt_\d+\.pt$", out, re.MULTILINE)


@pytest.mark.slow
def test_sigterm_to_torchrun_stops_every_rank_with_one_checkpoint_and_resume_continues(tmp_path):
    run_dir = tmp_path / "run"
    agent = launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch", *TINY,
                    "--total-steps", "16384", "--run-dir", str(run_dir), "--set", "run.checkpoint_interval_s=0.5")
    try:
        wait_for_checkpoint(agent, run_dir)
        agent.send_signal(signal.SIGTERM)
        out, _ = agent.communicate(timeout=300)  # a hang guard, not a timing bound
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
    # torchrun itself exits 1 on a signal; every rank stopped cleanly after the same update.
    assert out.count("stopping: received SIGTERM") == 1 and "learner replicas: identical on every rank" in out
    stopped = agent_steps(run_dir / "checkpoints" / "latest.pt")
    assert re.search(rf"job of 2 ranks: {stopped:,} agent-steps trained", out), out[-4000:]
    out = finish(launch("--standalone", "--nproc-per-node", "2", "-m", "pipeline.launch",
                          "--resume", str(run_dir), "--metrics-port", "-1"))
    assert f"resumed at {stopped:,}" in out
    assert agent_steps(run_dir / "checkpoints" / "latest.pt") == 16384
    assert f"job of 2 ranks: {16384 - stopped:,} agent-steps trained" in out


@pytest.mark.slow
def test_ranks_started_with_different_options_are_refused_on_every_rank(tmp_path):
    run_dir = tmp_path / "run"
    args = [*TINY, "--run-dir", str(run_dir)]
    outs = two_machines([[*args, "--total-steps", "4096"], [*args, "--total-steps", "8192"]], exit_code=2)
    for out in outs:
        errors = error_lines(out)
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
    outs = two_machines([args, args], pythonpath=[f"{REPO}{os.pathsep}{plugins}", str(REPO)], exit_code=2)
    for out in outs:
        errors = error_lines(out)
        assert len(errors) == 1 and "tr_opponent" in errors[0], out[-4000:]
        assert "exitcode  : 2" in out and "exitcode  : -" not in out
    assert any(" could not start: " in error_lines(out)[0] for out in outs)
    assert not run_dir.exists()
