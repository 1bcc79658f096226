"""bench/gpu.sh: the GPU checks in one go. Without a CUDA device it refuses in one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "gpu.sh"


def test_the_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="runs the whole GPU script where CUDA exists")
def test_without_a_cuda_device_it_refuses_in_one_line(tmp_path):
    # The script calls `python`: this interpreter's own directory first on the PATH.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    r = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "logs")], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == "bench/gpu.sh: no CUDA device visible to torch"
    assert list((tmp_path / "logs").iterdir()) == []  # no step ran
