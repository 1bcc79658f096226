"""Data parallel: two gloo CPU ranks under torchrun keep identical parameters, and the process
group is really gone (its threads stopped) once ``learner.distributed.shutdown`` returns."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from learner.distributed import shutdown

REPO = Path(__file__).resolve().parents[1]


def _gloo_threads() -> list[str]:
    """Names of this process's gloo threads (Linux names threads in /proc; elsewhere empty)."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return []
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:
            continue  # the thread ended while we looked
    return [n for n in names if "gloo" in n]


def _one_rank_group(tmp_path: Path, name: str) -> None:
    # A FileStore in tmp_path: no port to pick, nothing shared with other tests.
    store = dist.FileStore(str(tmp_path / name), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)


def test_shutdown_releases_the_group_or_says_why_not(tmp_path):
    _one_rank_group(tmp_path, "held")
    held = dist.group.WORLD  # what a module binding group.WORLD at import time does
    try:
        with pytest.raises(RuntimeError, match="still referenced"):
            shutdown()
        assert not dist.is_initialized()
    finally:
        del held  # the last reference: the group and its threads go now
    assert _gloo_threads() == []

    _one_rank_group(tmp_path, "free")
    shutdown()  # nothing else holds it
    assert not dist.is_initialized()
    assert _gloo_threads() == []


@pytest.mark.slow
def test_two_gloo_ranks_stay_identical(tmp_path):
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    # --standalone: the launcher's store binds port 0 and the ranks use it, so no port can clash.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "learner.ddp_smoke", "--updates", "3", "--out", str(out), "--checkpoint-dir",
           str(tmp_path / "ckpt")]
    # Own process group, so a hang kills the launcher's workers too, never leaving orphans.
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        # ~10 s idle, ~30 s with every core busy; the margin is for a loaded suite run.
        _, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    # The ranks' own errors come first, the launcher's summary last: keep both ends.
    assert proc.returncode == 0, stderr if len(stderr) <= 6000 else f"{stderr[:3000]}\n...\n{stderr[-3000:]}"
    report = json.loads(out.read_text())
    assert report["world_size"] == 2 and report["policy_version"] == 3
    assert report["param_change"] > 1e-4  # the ranks trained ...
    assert report["max_param_diff"] == 0.0  # ... on different data, yet stayed identical
    assert report["max_obs_norm_diff"] == 0.0
    # Statistics merged over both ranks: 3 updates × 64 samples × 2 ranks.
    assert report["obs_norm_count"] == 384.0
    assert report["checkpoints"] == ["ckpt_000000003.pt", "latest.pt"]
