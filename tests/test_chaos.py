"""The short chaos run: training runs SIGKILLed at random moments and resumed until done lose
nothing and leave nothing behind (``bench/chaos.py --quick``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_killed_and_resumed_runs_lose_nothing_and_leave_nothing():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "chaos.py"), "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    result = re.search(r"^RESULT kills=(\d+) resumes=(\d+) lost=(\d+) leftovers=(\d+)", out, re.M)
    assert result is not None, out
    kills, resumes, lost, leftovers = map(int, result.groups())
    assert kills >= 3 and resumes >= 1, out  # it really killed and resumed
    assert (lost, leftovers) == (0, 0), out
    assert done.returncode == 0, out
