"""Start ``torchrun`` jobs of ``pipeline.launch`` for the tests: two ranks of one agent, or two
agents on this host as two machines, and read what they leave."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import torch

from pipeline.run.ranks import TIMEOUT_VARIABLE

REPO = Path(__file__).resolve().parents[1]
TINY = ["--actors", "1", "--envs-per-actor", "16", "--display", "plain", "--metrics-port", "-1",
        "--set", "run.eval_episodes=0", "--set", "actors.processes=off"]
"""Each rank: one actor thread on 16 envs (a chunk is 256 agent-steps), no evaluation."""


def launch(*args: str, pythonpath: str = str(REPO), timeout_s: str = "", cwd: Path = REPO) -> subprocess.Popen[str]:
    """``python -m torch.distributed.run ARGS`` with this checkout importable, output to a pipe."""
    env = dict(os.environ, PYTHONPATH=pythonpath, OMP_NUM_THREADS="1")
    if timeout_s:
        env[TIMEOUT_VARIABLE] = timeout_s
    # Own process group: a hang is killed with every rank, leaving no orphans.
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen[str], timeout: float = 420) -> str:
    """The output of a job that must end with exit status 0 (killed with its ranks on a hang)."""
    try:
        out, _ = proc.communicate(timeout=timeout)  # a hang guard, not a timing bound
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"torchrun did not finish:\n{out[-6000:]}") from None
    assert proc.returncode == 0, out[-6000:]
    return out


def free_port() -> int:
    """A TCP port of 127.0.0.1 free just now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def two_machines(args: list[list[str]], pythonpath: list[str] | None = None,
                  exit_code: int = 0, cwds: list[Path] | None = None) -> list[str]:
    """Two ``torchrun`` agents as two machines of one rank each (c10d rendezvous on
    127.0.0.1), running ``pipeline.launch`` with ``args[node]`` in ``cwds[node]``; their
    outputs."""
    port = free_port()
    agents = [
        launch("--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
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


def rank_pid(agent: subprocess.Popen[str], rank: int) -> int | None:
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


def wait_for_checkpoint(agent: subprocess.Popen[str], run_dir: Path) -> None:
    """Wait (hang guard: the agent's own end) until the job wrote a periodic checkpoint."""
    while not list((run_dir / "checkpoints").glob("ckpt_*.pt")):
        try:
            agent.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue
        raise AssertionError(f"the job ended before its first checkpoint:\n{agent.communicate()[0][-4000:]}")


def agent_steps(checkpoint: Path) -> int:
    """The agent-steps a checkpoint was saved at."""
    return int(torch.load(checkpoint, map_location="cpu", weights_only=False)["extra"]["agent_steps"])


def error_lines(out: str) -> list[str]:
    """The lines of a job's output that report an error."""
    return [line for line in out.splitlines() if line.startswith("error: ")]
