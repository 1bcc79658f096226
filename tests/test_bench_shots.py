"""``bench/shots.py``: who fires first, from how far, and how each fight ends."""

from __future__ import annotations

import pytest
import torch

from tests.bench_scripts import exit_code, load_bench


def test_fighters_that_never_fire_log_no_launch_and_draw_at_the_time_limit(capsys):
    shots = load_bench("shots")
    log = shots.play("pursuit", "pursuit", starts=6, seed=3)
    assert log.episodes == 12 and log.drawn == {"time_limit": 12}
    assert not log.won and not log.lost
    assert log.launches == [0, 0] and log.first == [0, 0] and log.range_km == [[], []]


def test_only_the_shooting_side_fires_first_and_the_counts_reach_the_result_line(capsys):
    # shooter fires once in reach; pursuit never fires: every launch and first shot is the
    # agent's, from both sides of the sim, and no launch comes from beyond the spawn ranges.
    shots = load_bench("shots")
    log = shots.play("shooter", "pursuit", starts=8, seed=2)
    assert log.launches[0] > 0 and log.launches[1] == 0
    assert log.first[0] > 0 and log.first[1] == 0 and log.first[0] <= log.episodes
    assert len(log.range_km[0]) == log.launches[0] and all(0 < r < 200 for r in log.range_km[0])
    assert sum(log.won.values()) + sum(log.lost.values()) + sum(log.drawn.values()) == log.episodes == 16
    result = shots.main(["--agent", "shooter", "--opponents", "pursuit", "--starts", "8", "--seed", "2"])
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("RESULT episodes=16 ")
    assert result["agent_first"] == log.first[0] and result["won"] == sum(log.won.values())
    assert result["agent_launches"] == round(log.launches[0] / 16, 2)


@pytest.mark.parametrize("argv", [["--agent", "pursuit", "--starts", "0"],
                                  ["--agent", "pursuit", "--opponents", " , "]])
def test_bad_arguments_are_refused(argv, capsys):
    assert exit_code("shots", argv) == 2


def test_a_launch_soon_after_the_enemys_is_a_reply_and_one_in_the_same_decision_is_not():
    # Four fights driven by hand through the watcher: the agent (red) fires 5 s after the
    # enemy, 60 s after it, in the same decision as it, and with no enemy launch at all.
    from types import SimpleNamespace

    from sim import BatchedSim, SimConfig

    shots = load_bench("shots")
    log = shots.ShotLog()
    watcher = shots.ShotWatcher(log, agent_side=0, dt_s=0.1)
    state = BatchedSim(4, SimConfig(), device="cpu", seed=0).state
    watcher.episodes_started(state, torch.ones(4, dtype=torch.bool))
    not_done = SimpleNamespace(done=torch.zeros(4, dtype=torch.bool))

    def decision(step: int, red: list[int], blue: list[int]) -> None:
        state.physics_steps.fill_(step)
        state.f_ammo[0] -= torch.tensor(red, dtype=state.f_ammo.dtype)
        state.f_ammo[1] -= torch.tensor(blue, dtype=state.f_ammo.dtype)
        watcher.decision_end(state, not_done)

    decision(10, red=[0, 0, 1, 0], blue=[1, 1, 1, 0])
    decision(60, red=[1, 0, 0, 0], blue=[0, 0, 0, 0])
    decision(610, red=[0, 1, 0, 1], blue=[0, 0, 0, 0])
    assert log.launches == [4, 3] and log.replies == [1, 0]
    # Fired first: the enemy in the first two fights, the agent in the last (no enemy launch)
    # and in the third (the same decision counts for the agent's side).
    assert log.first == [2, 2]


def test_launches_are_counted_against_the_no_escape_reach_by_the_fights_outcome():
    # Two fights driven by hand: in the first the fighters fly head-on 10 km apart (inside any
    # no-escape reach), in the second 190 km apart (outside any); each side fires once in each.
    # The first fight is then the agent's win, the second a draw.
    from types import SimpleNamespace

    from sim import BatchedSim, SimConfig

    shots = load_bench("shots")
    log = shots.ShotLog()
    watcher = shots.ShotWatcher(log, agent_side=1)
    state = BatchedSim(2, SimConfig(), device="cpu", seed=0).state
    for side, sign in ((0, -1.0), (1, 1.0)):
        state.f_px[side] = torch.tensor([5_000.0, 95_000.0]) * sign
        state.f_py[side] = 0.0
        state.f_vx[side] = -sign * 300.0
        state.f_vy[side] = 0.0
    watcher.episodes_started(state, torch.ones(2, dtype=torch.bool))
    state.f_ammo -= 1
    watcher.decision_end(state, SimpleNamespace(done=torch.ones(2, dtype=torch.bool)))
    watcher.settle(torch.tensor([1, 2]))
    assert log.by_outcome == [[1, 1, 0], [1, 1, 0]]
    assert log.outside_nez == [[0, 1, 0], [0, 1, 0]]
    assert shots.outside_share(log, 0) == 0.5 and shots.outside_share(log, 0, "drawn") == 1.0
    assert shots.outside_share(log, 1, "won") == 0.0
    assert shots.outside_share(log, 0, "lost") != shots.outside_share(log, 0, "lost")  # nan: no launch


def test_a_result_line_carries_the_share_of_launches_from_outside_the_no_escape_reach(capsys):
    shots = load_bench("shots")
    result = shots.main(["--agent", "shooter", "--opponents", "pursuit", "--starts", "8", "--seed", "2"])
    out = capsys.readouterr().out
    assert "launches from outside its no-escape reach" in out
    assert 0.0 <= result["agent_outside_nez"] <= 1.0
