"""pipeline.evaluate: intervals, the Bradley–Terry fit, seeded batched matches, the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from agents import make_agent
from pipeline.evaluate import main, run
from pipeline.evaluation.intervals import wilson_interval
from pipeline.evaluation.matches import MatchStats, play_first_episodes, play_match
from pipeline.evaluation.ratings import bradley_terry
from sim import BatchedSim, SimConfig


@pytest.fixture(autouse=True)
def one_thread():
    """Batched runs of small tensors go fastest, and share the machine best, on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_wilson_interval_known_values():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def _synthetic(names, elo, games):
    stats = []
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            p = 1 / (1 + 10 ** ((elo[j] - elo[i]) / 400))
            wins = round(p * games)
            stats.append(MatchStats(names[i], names[j], episodes=games, wins=wins, losses=games - wins))
    return stats


def test_bradley_terry_recovers_known_ratings():
    names = ["a", "b", "c", "d"]
    true = [1800.0, 1550.0, 1450.0, 1200.0]
    ratings = bradley_terry(names, _synthetic(names, true, 200_000))
    got = [ratings[n]["elo"] for n in names]
    assert sum(got) / 4 == pytest.approx(1500)
    assert got == pytest.approx(true, abs=2.0)
    assert all(0 < ratings[n]["stderr"] < 5 for n in names)


def test_bradley_terry_is_the_maximum_likelihood_fit_with_draws():
    # At the MLE each entrant's expected points equal its points (draws as halves, plus the
    # virtual draw per pair): check that score equation on an uneven, intransitive table.
    names = ["x", "y", "z"]
    stats = [MatchStats("x", "y", 40, 25, 5, 10), MatchStats("y", "z", 30, 20, 2, 8),
             MatchStats("z", "x", 50, 20, 10, 20)]
    r = bradley_terry(names, stats)
    theta = {n: r[n]["elo"] * math.log(10) / 400 for n in names}
    points = dict.fromkeys(names, 0.0)
    expected = dict.fromkeys(names, 0.0)
    for m in stats:
        n = m.episodes + 1
        points[m.agent] += m.wins + 0.5 * m.draws + 0.5
        points[m.opponent] += m.losses + 0.5 * m.draws + 0.5
        p = 1 / (1 + math.exp(theta[m.opponent] - theta[m.agent]))
        expected[m.agent] += n * p
        expected[m.opponent] += n * (1 - p)
    for name in names:
        assert expected[name] == pytest.approx(points[name], abs=1e-6)


def test_bradley_terry_stays_finite_when_someone_wins_everything():
    r = bradley_terry(["ace", "rookie"], [MatchStats("ace", "rookie", 1000, 1000, 0, 0)])
    gap = r["ace"]["elo"] - r["rookie"]["elo"]
    assert math.isfinite(gap) and 1000 < gap < 1600


def test_each_start_is_played_from_both_sides():
    # The shooter beats the straight flyer from either side; the count is split evenly.
    stats = play_match("straight", "shooter", 10, SimConfig(scenario="head_on"), seed=0)
    assert stats.episodes == 10 and stats.losses == 10 and stats.wins == stats.draws == 0
    assert stats.lost_by["kill"] == stats.end_reasons["kill"] == 10
    assert sum(stats.won_by.values()) == 0 and sum(stats.lost_by.values()) == 10
    sim = BatchedSim(3, SimConfig(scenario="head_on"))
    red = make_agent("straight", 3, sim.layout)
    with pytest.raises(ValueError, match="blue agent has num_envs=2"):
        play_first_episodes(sim, red, make_agent("straight", 2, sim.layout))
    res = play_first_episodes(sim, make_agent("straight", 3, sim.layout), make_agent("shooter", 3, sim.layout))
    assert res["winner"].tolist() == [1, 1, 1] and bool((res["length_steps"] > 0).all())


def test_same_command_same_table_and_json(tmp_path):
    argv = ["--agent", "random", "--opponents", "shooter,straight", "--episodes", "12", "--seed", "3",
            "--batch", "6"]
    first = main([*argv, "--json", str(tmp_path / "a.json")])
    second = main([*argv, "--json", str(tmp_path / "b.json")])
    assert first == second
    saved = json.loads((tmp_path / "a.json").read_text())
    assert saved == json.loads(json.dumps(first))
    m = saved["matches"][0]
    assert m["opponent"] == "shooter" and m["episodes"] == 12
    assert m["wins"] + m["draws"] + m["losses"] == 12
    # Every win and loss is counted once under how it ended, and within that reason's total.
    assert sum(m["won_by"].values()) == m["wins"] and sum(m["lost_by"].values()) == m["losses"]
    assert all(m["won_by"][r] + m["lost_by"][r] <= m["end_reasons"][r] for r in m["end_reasons"])
    assert m["won_by"]["time_limit"] == m["lost_by"]["time_limit"] == 0
    assert m["win_ci95"][0] <= m["win_rate"] <= m["win_ci95"][1]
    assert m["mean_length_s"] == pytest.approx(m["mean_length_steps"] * 0.5)
    other_seed = main([*argv[:-4], "--seed", "4", "--batch", "6"])
    assert other_seed["matches"] != first["matches"]


def test_round_robin_ranks_the_ladder(capsys):
    payload = main(["--round-robin", "straight,shooter,crank", "--episodes", "8", "--scenario", "head_on"])
    elo = {k: v["elo"] for k, v in payload["ratings"].items()}
    assert elo["crank"] > elo["shooter"] > elo["straight"]
    assert len(payload["matches"]) == 3
    out = capsys.readouterr().out
    assert "elo" in out and "crank" in out


def test_command_line(tmp_path, capsys):
    cmd = [sys.executable, "-m", "pipeline.evaluate", "--agent", "shooter", "--opponents", "straight",
           "--episodes", "4", "--scenario", "head_on", "--json", str(tmp_path / "r.json")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "win [95% CI]" in done.stdout and "100.0%" in done.stdout
    assert json.loads((tmp_path / "r.json").read_text())["agent"] == "shooter"
    with pytest.raises(SystemExit) as exited:
        run(["--agent", "kamikaze", "--episodes", "2"])
    assert exited.value.code == 2
    assert "error: unknown agent 'kamikaze'" in capsys.readouterr().err


def test_a_checkpoint_is_evaluated_reproducibly(tmp_path):
    from learner import ActionSpec, PPOConfig, PPOLearner
    from learner.checkpoint import save_checkpoint
    from sim.layout import ObsLayout

    layout = ObsLayout.from_config(SimConfig())
    learner = PPOLearner(PPOConfig(hidden_sizes=(16,)), layout.size, ActionSpec.for_sim(SimConfig()),
                         obs_layout=layout.metadata())
    save_checkpoint(tmp_path / "run", learner)
    argv = ["--agent", str(tmp_path / "run"), "--opponents", "shooter", "--episodes", "8", "--seed", "1"]
    first, second = main(argv), main(argv)
    assert first == second and first["matches"][0]["episodes"] == 8


def _checkpoint_on(sim: SimConfig, directory):
    from learner import ActionSpec, PPOConfig, PPOLearner
    from learner.checkpoint import save_checkpoint
    from sim.layout import ObsLayout

    layout = ObsLayout.from_config(sim)
    learner = PPOLearner(PPOConfig(hidden_sizes=(16,)), layout.size, ActionSpec.for_sim(sim),
                         obs_layout=layout.metadata())
    save_checkpoint(directory, learner, {"config": {"sim": sim.to_dict()}})
    return str(directory)


def test_a_checkpoint_is_judged_on_the_sim_it_was_trained_on(tmp_path):
    reach = _checkpoint_on(SimConfig(obs_reach=True), tmp_path / "reach")
    out = main(["--agent", reach, "--opponents", "straight", "--episodes", "2"])
    assert out["matches"][0]["episodes"] == 2  # 84 observation floats, not the default's 81
    # One without the block meets it in the sim with the block, reading the frame before it.
    plain = _checkpoint_on(SimConfig(), tmp_path / "plain")
    out = main(["--round-robin", f"{reach},{plain}", "--episodes", "2"])
    assert sum(m["episodes"] for m in out["matches"]) >= 2
    longer = _checkpoint_on(SimConfig(max_time_s=200.0), tmp_path / "longer")
    with pytest.raises(ValueError, match=r"trained on different sims \(max_time_s: 300.0 != 200.0\)"):
        main(["--round-robin", f"{plain},{longer}", "--episodes", "2"])
    history = _checkpoint_on(SimConfig(obs_history=1), tmp_path / "history")
    with pytest.raises(ValueError, match="trained on another observation layout"):
        main(["--round-robin", f"{reach},{history}", "--episodes", "2"])  # past frames without the block
