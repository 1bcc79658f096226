"""``bench/opponent.py``: a policy opponent's decision, ``act`` against ``act_only``."""

from __future__ import annotations

import re

import pytest

from tests.bench_scripts import load_bench


def test_the_result_line_times_both_calls_per_batch(capsys):
    bench = load_bench("opponent")
    assert bench.main(["--hidden", "8", "--batches", "4,16", "--seconds", "0.01", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    last = out.splitlines()[-1]
    assert last.startswith("RESULT hidden=8 ")
    for batch in (4, 16):
        m = re.search(rf"act_us_{batch}=([\d.]+) act_only_us_{batch}=([\d.]+) ratio_{batch}=([\d.]+)", last)
        assert m, last
        full, only, ratio = (float(x) for x in m.groups())
        assert full > 0 and only > 0
        assert ratio == pytest.approx(full / only, rel=0.01)


@pytest.mark.parametrize("bad", [["--batches", "0"], ["--hidden", "a,b"], ["--seconds", "0"]])
def test_bad_arguments_are_refused_at_the_command_line(bad):
    bench = load_bench("opponent")
    with pytest.raises(SystemExit) as exc:
        bench.main(bad)
    assert exc.value.code == 2
