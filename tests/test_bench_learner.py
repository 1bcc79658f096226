"""``bench/learner.py``: the PPO update timed eager and with the compiled loss."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from pipeline.config.resolution import resolve

REPO = Path(__file__).resolve().parents[1]


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_learner", REPO / "bench" / "learner.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_learner"] = module
    spec.loader.exec_module(module)
    return module


def test_an_update_is_timed_on_the_defaults_batch_with_the_overrides_applied():
    bench = load_bench()
    seconds, samples, hidden = bench.time_updates(False, {"hidden_sizes": (16,)}, warmup=1, updates=2)
    assert seconds > 0
    assert samples == resolve({}, device="cpu").samples_per_batch
    assert tuple(hidden) == (16,)


@pytest.mark.slow
def test_the_result_line_compares_both_modes(capsys):
    bench = load_bench()
    bench.main(["--warmup", "1", "--updates", "2", "--set", "hidden_sizes=[16]"])
    out = capsys.readouterr().out
    m = re.search(r"RESULT .*eager_ms=([\d.]+) compiled_ms=([\d.]+) ratio=([\d.]+)", out.splitlines()[-1])
    assert m, out
    eager, compiled, ratio = (float(x) for x in m.groups())
    assert eager > 0 and compiled > 0
    assert ratio == pytest.approx(eager / compiled, rel=0.01)
