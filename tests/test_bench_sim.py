"""bench/sim.py's profile of the torch path: where a decision step's time goes, by kernel."""

from __future__ import annotations

import torch

from sim import SimConfig
from tests.bench_scripts import load_bench


def test_the_profile_counts_the_operators_of_a_decision_step():
    bench = load_bench("sim")
    prof = bench.profile_torch(64, torch.device("cpu"), "eager", SimConfig(), steps=2, rows=100)
    # The step's physics runs cos and sin (the exact turn) and its sqrt among many other ops.
    assert "aten::cos" in prof["table"] and "aten::sqrt" in prof["table"]
    assert prof["launches_per_decision"] > 100  # 5 physics steps of dozens of ops each
    assert prof["self_ms_per_decision"] > 0
