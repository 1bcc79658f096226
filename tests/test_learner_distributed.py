"""Data parallel: two gloo CPU ranks under torchrun keep identical parameters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_two_gloo_ranks_stay_identical(tmp_path):
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "learner.ddp_smoke", "--updates", "3", "--out", str(out), "--checkpoint-dir",
           str(tmp_path / "ckpt")]
    # Own process group, so a hang kills the launcher's workers too, never leaving orphans.
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["world_size"] == 2 and report["policy_version"] == 3
    assert report["param_change"] > 1e-4  # the ranks trained ...
    assert report["max_param_diff"] == 0.0  # ... on different data, yet stayed identical
    assert report["max_obs_norm_diff"] == 0.0
    # Statistics merged over both ranks: 3 updates × 64 samples × 2 ranks.
    assert report["obs_norm_count"] == 384.0
    assert report["checkpoints"] == ["ckpt_000000003.pt", "latest.pt"]
