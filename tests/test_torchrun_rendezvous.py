"""A machine that never joins: ``torchrun`` ends the rendezvous at its ``join_timeout`` before
any rank starts, and nothing of the run is written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.torchrun_harness import REPO, free_port


@pytest.mark.slow
def test_a_machine_that_never_joins_ends_at_the_join_timeout_with_nothing_written(tmp_path):
    port = free_port()
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "alone",
         "--rdzv-conf", "join_timeout=5", "-m", "pipeline.launch", "--run-dir", "run", "--total-steps", "4096"],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
        timeout=300)  # a hang guard, not a timing bound
    assert done.returncode == 1
    assert "RendezvousTimeoutError" in done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == []
