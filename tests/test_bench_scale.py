"""``bench/scale.py --quick``: the same work with 1 and 2 ``torchrun`` ranks, and the learner's
gradient all-reduce timed inside the 2-rank run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a core per rank: needs 2 cores")
def test_quick_scale_runs_both_sizes_and_times_the_all_reduce():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "scale.py"), "--quick"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)  # a hang guard only
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("RESULT "), done.stdout[-3000:]
    fields = dict(kv.split("=", 1) for kv in last.split()[1:])
    one, two = float(fields["ranks1_agent_steps_per_s"]), float(fields["ranks2_agent_steps_per_s"])
    assert one > 0 and two > 0
    assert float(fields["ratio"]) == pytest.approx(two / (2 * one), abs=2e-3)
    # The ceiling: two independent 1-rank jobs side by side, one per core, each half the work.
    pair = float(fields["pair_agent_steps_per_s"])
    assert pair > 0
    assert float(fields["pair_ratio"]) == pytest.approx(pair / (2 * one), abs=2e-3)
    assert float(fields["ratio_to_pair"]) == pytest.approx(two / pair, abs=2e-3)
    assert re.search(r"^2 x 1 rank side by side run 0: [\d,]+ agent-steps/s", done.stdout, re.M)
    # The 2-rank job all-reduced the whole gradient of the default network, a positive time each.
    assert int(fields["gradient_floats"]) > 10_000
    assert float(fields["allreduce_ms"]) > 0 and float(fields["allreduce_bare_ms"]) > 0
    assert 0 < float(fields["allreduce_share"]) < 1
    assert re.search(r"^2 rank\(s\) run 0: .* gradient all-reduce [\d.]+ ms", done.stdout, re.M)


@pytest.mark.slow
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a core per rank: needs 2 cores")
def test_gradient_sync_off_measures_the_two_rank_job_without_its_gradient_all_reduce():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "scale.py"), "--quick", "--gradient-sync", "off"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)  # a hang guard only
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    fields = dict(kv.split("=", 1) for kv in done.stdout.strip().splitlines()[-1].split()[1:])
    assert fields["gradient_sync"] == "off"
    # No rank called the gradient all-reduce, and the job still trained its whole budget.
    assert int(fields["gradient_floats"]) == 0 and float(fields["allreduce_ms"]) == 0
    assert float(fields["ranks2_agent_steps_per_s"]) > 0
    assert "gradient all-reduce: skipped by every rank" in done.stdout
