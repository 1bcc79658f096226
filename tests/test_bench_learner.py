"""``bench/learner.py``: the PPO update timed eager and with the compiled loss."""

from __future__ import annotations

import re

import pytest

from pipeline.config.resolution import resolve
from tests.bench_scripts import load_bench


def test_an_update_is_timed_on_the_defaults_batch_with_the_overrides_applied():
    bench = load_bench("learner")
    seconds, samples, hidden = bench.time_updates(False, {"ppo": {"hidden_sizes": [16]}}, warmup=1, updates=2)
    assert seconds > 0
    assert samples == resolve({}, device="cpu").samples_per_batch
    assert tuple(hidden) == (16,)


def test_the_taught_update_is_timed_when_asked_for():
    # The default update is the one after the teacher's quarter; the taught one asks the teacher.
    bench = load_bench("learner")
    seconds, _, _ = bench.time_updates(False, {"ppo": {"hidden_sizes": [16], "teacher_coef": 1.0}},
                                       warmup=1, updates=2)
    assert seconds > 0


@pytest.mark.slow
def test_the_result_line_compares_both_modes(capsys):
    bench = load_bench("learner")
    bench.main(["--warmup", "1", "--updates", "2", "--set", "ppo.hidden_sizes=[16]"])
    out = capsys.readouterr().out
    m = re.search(r"RESULT .*eager_ms=([\d.]+) compiled_ms=([\d.]+) ratio=([\d.]+)", out.splitlines()[-1])
    assert m, out
    eager, compiled, ratio = (float(x) for x in m.groups())
    assert eager > 0 and compiled > 0
    assert ratio == pytest.approx(eager / compiled, rel=0.01)


def test_a_bad_setting_is_refused_in_one_line_before_any_timing(capsys):
    assert load_bench("learner").main(["--set", "ppo.bogus=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: ppo: unknown PPO config field(s): bogus"]


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a host without CUDA")
def test_a_missing_cuda_device_is_refused_in_one_line_before_any_timing(capsys):
    assert load_bench("learner").main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: run.device is 'cuda' but no CUDA device is available"]
