"""``bench/draws.py``: the state one decision before each drawn episode's end."""

from __future__ import annotations

import pytest

from sim import SimConfig
from tests.bench_scripts import exit_code, load_bench


def test_two_fighters_that_never_fire_draw_at_the_time_limit_fully_armed(capsys):
    """``pursuit`` never fires: against itself every fight runs to the time limit with both
    sides' missiles on board, so no draw may be counted as against a disarmed enemy."""
    draws = load_bench("draws")
    full = SimConfig().missiles_per_fighter
    log = draws.play("pursuit", "pursuit", starts=6, seed=3)
    assert log.episodes == 12 and log.wins == log.losses == 0
    assert log.draws == 12 and log.reasons == {"time_limit": 12}
    assert log.own_left == [full] * 12 and log.enemy_left == [full] * 12
    assert log.enemy_in_flight == [0] * 12
    assert log.disarmed() == 0 and log.armed() == 12
    assert all(r > 0 for r in log.range_km)


def test_the_counts_add_up_and_reach_the_result_line(capsys):
    draws = load_bench("draws")
    result = draws.main(["--agent", "random", "--opponents", "random", "--starts", "64", "--seed", "1"])
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith("RESULT episodes=128 ")
    log = draws.play("random", "random", starts=64, seed=1)
    assert log.draws > 0 and log.wins + log.losses + log.draws == 128
    assert sum(log.reasons.values()) == log.draws == result["draws"]
    assert result["agent_armed"] == log.armed() and result["enemy_disarmed"] == log.disarmed()
    full = SimConfig().missiles_per_fighter
    assert all(0 <= m <= full for m in log.own_left + log.enemy_left + log.enemy_in_flight)


@pytest.mark.parametrize("argv", [["--agent", "pursuit", "--starts", "0"],
                                  ["--agent", "pursuit", "--opponents", " , "]])
def test_bad_arguments_are_refused(argv, capsys):
    assert exit_code("draws", argv) == 2


def test_quick_plays_32_starts_per_opponent(capsys):
    draws = load_bench("draws")
    result = draws.main(["--agent", "random", "--opponents", "random", "--quick"])
    assert result["episodes"] == 64
