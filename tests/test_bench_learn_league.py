"""``bench/learn_league.py --quick``: the whole bench (league training in parts, curve rows, the
final evaluation, the round robin with the pool, the exploiter) runs and prints its RESULT line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agents.tactics import HELDOUT
from learner.checkpoint import list_checkpoints, read_checkpoint
from pipeline.config.files import load_toml

REPO = Path(__file__).resolve().parents[1]


def read_anchors(run: Path) -> list[str]:
    """The league anchors a run trained against."""
    return list(load_toml(run / "config.toml")["league"]["anchors"])


def league_config(settings):
    """The launcher's resolved config for ``--opponent league`` with ``--set`` for each setting."""
    from pipeline.config import resolve
    from pipeline.config.flags import parse_config

    return resolve(parse_config(["--opponent", "league", *(a for kv in settings for a in ("--set", kv))]))


def league_bench(monkeypatch):
    """bench/learn_league.py as a module, with its sibling scripts importable as when it runs."""
    from tests.bench_scripts import load_bench

    monkeypatch.syspath_prepend(str(REPO / "bench"))
    return load_bench("learn_league")


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the bench, then the same run judged again: 5 minutes beside a busy job
def test_the_league_bench_runs_end_to_end(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "bench" / "learn_league.py"), "--quick",
                           "--run-dir", str(tmp_path / "run"), "--average-from", "0.5", "--judge", "final"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    line = re.search(r"^RESULT (.*)$", out, re.M)
    assert line is not None, out
    result = dict(kv.split("=", 1) for kv in line[1].split())
    rates = ("win_crank", "win_random", "win_ladder_min", "win_heldout_min", "exploit_win")
    assert all(0.0 <= float(result[k]) <= 1.0 for k in rates), result
    assert result["top_rated"], result
    # Each exploiter on a line of its own (--quick trains one), the strongest the RESULT's.
    lines = re.findall(r"^\s+exploiter seed \d+ against final: win ([\d.]+)%", out, re.M)
    assert len(lines) == 1 and result["exploit_wins"] == f"{float(result['exploit_win']):.3f}", out
    assert abs(float(lines[0]) / 100 - float(result["exploit_win"])) < 0.001, out
    # Its run is kept beside the league's, to be watched against the final.
    assert (tmp_path / "run" / "exploiters" / "final" / "exploiter0" / "checkpoints" / "latest.pt").is_file()
    # Every held-out tactic on a line of its own, its lowest win rate the RESULT's.
    held = re.search(r"^\s+held-out win/draw/loss: (.*)$", out, re.M)
    assert held is not None, out
    pairs = held[1].split()
    assert pairs[::2] == [s.removeprefix("tactic:").removesuffix("?heldout") for s in HELDOUT], out
    assert "herd" in pairs[::2] and "skate" in pairs[::2]
    assert min(float(x.split("/")[0]) for x in pairs[1::2]) == float(result["win_heldout_min"])
    # Two curve rows, and the round robin entered the scripted agents, a snapshot and the final.
    rows = re.findall(r"^\s+[\d,]+ steps\s+(\d+)s\s+crank\s+([\d.]+)%\s+random\s+([\d.]+)%", out, re.M)
    assert len(rows) == 2, out
    # The time to 95 %: the first row at 95 % against both crank and random, if any.
    first = next((int(t) for t, c, r in rows if min(float(c), float(r)) >= 95.0), None)
    assert result["time_to_95_s"] == ("none" if first is None else str(first)), (result, rows)
    assert "round robin of 8 " in out, out  # the scripted five, a snapshot, the final and the average
    assert (tmp_path / "run" / "league" / "league.json").is_file()
    # The average of the checkpoints from half the run on entered the round robin (--judge final:
    # only the final judged).
    averaged = read_checkpoint(tmp_path / "run" / "checkpoints" / "average.pt")["extra"]["averaged"]
    steps = averaged["agent_steps"]
    assert averaged["checkpoints"] >= 1 and min(steps) >= max(steps) / 2, averaged
    assert re.search(r"^\s+average\s+-?\d+ ± \d+$", out, re.M) and "RESULT_AVERAGE" not in out, out
    # The finished run judged again without training: the average and the checkpoint selected
    # against the anchors, each judged as the final was, on a RESULT line of its own; the final
    # in the round robin.
    again = subprocess.run([sys.executable, str(REPO / "bench" / "learn_league.py"), "--quick", "--judge-only",
                            "--run-dir", str(tmp_path / "run"), "--average-from", "0.5", "--select-from", "0.5",
                            "--judge", "average,selected"],
                           cwd=REPO, capture_output=True, text=True, timeout=1800)  # ran past 900 s beside a league run
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert "training skipped (--judge-only)" in out and "round robin of 9 " in out, out
    kept = re.search(r"^\s+(ckpt_\d+\.pt)\s.*<- kept$", out, re.M)
    assert kept is not None, out
    selected = read_checkpoint(tmp_path / "run" / "checkpoints" / "selected.pt")["extra"]["selected"]
    assert selected["checkpoint"] == kept[1], selected
    assert set(selected["candidates"][0]["win_rates"]) == set(read_anchors(tmp_path / "run")), selected
    assert re.search(r"^RESULT_SELECTED .*train_s=skipped", out, re.M), out
    assert re.search(r"^\s+exploiter seed \d+ against selected: win ([\d.]+)%", out, re.M), out
    assert re.search(r"^\s+final\s+-?\d+ ± \d+$", out, re.M), out
    assert re.search(r"^RESULT_AVERAGE .*train_s=skipped", out, re.M) and not re.search(r"^RESULT ", out, re.M), out
    assert "against final" not in out, out
    avg = re.search(r"^RESULT_AVERAGE (.*)$", out, re.M)
    avg_result = dict(kv.split("=", 1) for kv in avg[1].split())
    assert all(0.0 <= float(avg_result[k]) <= 1.0 for k in rates), avg_result
    assert re.search(r"^\s+exploiter seed \d+ against average: win ([\d.]+)%", out, re.M), out
    assert (tmp_path / "run" / "exploiters" / "average" / "exploiter0" / "checkpoints" / "latest.pt").is_file()
    assert re.search(r"^\s+held-out win/draw/loss: pump", out, re.M), out
    # Judged once: a second time is refused before anything runs, naming what is there.
    third = subprocess.run([sys.executable, str(REPO / "bench" / "learn_league.py"), "--quick", "--judge-only",
                            "--run-dir", str(tmp_path / "run"), "--average-from", "0.5", "--judge", "average"],
                           cwd=REPO, capture_output=True, text=True, timeout=600)
    assert third.returncode == 2 and "exploiters/average exists" in third.stderr, third.stderr


@pytest.mark.slow
@pytest.mark.timeout(1500)  # three runs and the bench's evaluation: 6 minutes beside a busy job
def test_main_exploiters_trained_between_stages_join_the_anchors(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "learn_league.py"), "--quick",
                           "--exploiter-rounds", "1", "--run-dir", str(run)],
                          cwd=REPO, capture_output=True, text=True, timeout=1200)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    # A line for the round, naming the policy's agent-steps when it stopped: the run was cut at
    # half its budget (rounded up to whole chunks).
    rounds = re.findall(r"^main exploiter (\d) \(the policy at ([\d,]+) agent-steps\): win [\d.]+%", out, re.M)
    assert [r[0] for r in rounds] == ["0"], out
    assert 40_960 // 2 <= int(rounds[0][1].replace(",", "")) < 40_960, out
    # The exploiter's final policy is a league anchor of the stage after it, and the run ended
    # with one learning-rate schedule over its whole budget.
    anchors = json.loads((run / "league" / "league.json").read_text())["anchors"]
    assert anchors[-1] == str(run / "exploiters" / "round0" / "checkpoints" / "latest.pt")
    assert len(anchors) == 12  # the bench's eleven, and the exploiter
    assert read_checkpoint(run / "checkpoints" / "latest.pt")["extra"]["agent_steps"] >= 40_960
    for ckpt in list_checkpoints(run / "checkpoints"):  # every stage's on the same schedule
        state = read_checkpoint(ckpt)
        cfg, version = state["config"], state["policy_version"]
        expected = cfg["learning_rate"] * (1 - (version - 1) / cfg["total_updates"])
        assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(expected), ckpt
    # The curve's clock runs from the start of the first stage, not from the last resume.
    times = [int(t) for t in re.findall(r"^\s+[\d,]+ steps\s+(-?\d+)s\s+crank", out, re.M)]
    assert len(times) == 2 and 0 <= times[0] <= times[1], out
    line = re.search(r"^RESULT (.*)$", out, re.M)
    assert line is not None and "exploiter_rounds=1" in line[1], out


def test_the_named_recipes_are_the_ace_recipe_with_the_measured_changes(monkeypatch):
    # bench/RESULTS.md's "-0.75*draw" runs were ``--recipe ace`` (then the only one) with these
    # --set changes; ``--recipe taught`` must resolve to the same launcher config.
    bench = league_bench(monkeypatch)
    measured = ["ppo.teacher=ace", "ppo.teacher_coef=1", "ppo.teacher_until=0.5",
                "actors.reward=shaped+0.5*hunt+-0.75*draw+0.5*edge", "ppo.gamma=0.998",
                "league.anchors=['crank','shooter','random','pursuit','straight','tactic:pump?train',"
                "'tactic:drag?train','tactic:late?train','tactic:early?train','tactic:energy?train',"
                "'tactic:ladder?train','tactic:bluff?train','tactic:extend?train']"]

    taught, ace = league_config(bench.RECIPES["taught"]), league_config(bench.RECIPES["ace"])
    assert taught == league_config([*bench.RECIPES["ace"], *measured])
    assert taught != ace and ace.ppo.teacher_coef == 0 and taught.ppo.teacher == "ace"
    assert sorted(bench.RECIPES) == ["ace", "anchored", "guarded", "horizon", "pressed", "sparring", "taught", "traced",
                                     "tutored", "wandering"]
    # bench/RESULTS.md's trace runs with a quarter of past selves were ``--recipe taught`` with
    # these two --set changes.
    traced = league_config(bench.RECIPES["traced"])
    assert traced == league_config([*bench.RECIPES["taught"], "sim.obs_trace_s=20", "league.self_play=0.25"])
    assert traced.sim.obs_trace_s == 20 and traced.league.self_play == 0.25 and traced.ppo.teacher == "ace"
    # ... and those with no past selves among the opponents, the trace with league.self_play=0.
    anchored = league_config(bench.RECIPES["anchored"])
    assert anchored == league_config([*bench.RECIPES["taught"], "sim.obs_trace_s=20", "league.self_play=0"])
    assert anchored.league.self_play == 0 and anchored.sim.obs_trace_s == 20 and anchored != traced
    # ... and the γ 0.999 runs were ``--recipe anchored`` with these --set changes, in this order.
    horizon_sets = ["league.anchors=['crank','shooter','random','pursuit','straight','tactic:pump?train',"
                    "'tactic:drag?train','tactic:late?train','tactic:early?train','tactic:energy?train',"
                    "'tactic:ladder?train','tactic:bluff?train','tactic:extend?train','tactic:flee?train']",
                    "actors.reward=shaped+0.5*hunt+-0.75*draw+0.5*edge+-0.1*wasted", "sim.obs_reach=true",
                    "ppo.teacher_weights=[1,1,0]", "ppo.teacher_until=0.75", "ppo.gamma=0.999"]
    horizon = league_config(bench.RECIPES["horizon"])
    assert horizon == league_config([*bench.RECIPES["anchored"], *horizon_sets])
    assert horizon.ppo.gamma == 0.999 and horizon.sim.obs_reach and "tactic:flee?train" in horizon.league.anchors
    assert horizon.league.self_play == 0 and horizon.ppo.teacher == "ace" and horizon != anchored
    # ... and the runs with the enemy pressed against the edge priced were ``--recipe horizon``
    # with this reward.
    pressed = league_config(bench.RECIPES["pressed"])
    press = "actors.reward=shaped+0.5*hunt+-0.75*draw+0.5*edge+-0.1*wasted+0.5*press"
    assert pressed == league_config([*bench.RECIPES["horizon"], press])
    assert pressed.actors.reward.endswith("+0.5*press") and pressed != horizon
    # ... and the runs with wander as a fifteenth anchor were ``--recipe pressed`` with these anchors.
    wander = ("league.anchors=['crank','shooter','random','pursuit','straight','tactic:pump?train',"
              "'tactic:drag?train','tactic:late?train','tactic:early?train','tactic:energy?train',"
              "'tactic:ladder?train','tactic:bluff?train','tactic:extend?train','tactic:flee?train',"
              "'tactic:wander?train']")
    wandering = league_config(bench.RECIPES["wandering"])
    assert wandering == league_config([*bench.RECIPES["pressed"], wander])
    assert wandering.league.anchors[-1] == "tactic:wander?train" and len(wandering.league.anchors) == 15
    # ... and the runs taught by ace3 at full weight were ``--recipe pressed`` with those anchors
    # and these --set changes.
    tutored = league_config(bench.RECIPES["tutored"])
    taught_by_ace3 = ["ppo.teacher=ace3", "ppo.teacher_weights=[1,1,1]", "ppo.teacher_floor=1.0"]
    assert tutored == league_config([*bench.RECIPES["pressed"], wander, *taught_by_ace3])
    assert tutored.ppo.teacher == "ace3" and tutored.ppo.teacher_floor == 1.0 and tutored != wandering
    # ... and the runs of tutored with a quarter past selves were ``--recipe tutored`` with one --set.
    sparring = league_config(bench.RECIPES["sparring"])
    assert sparring == league_config([*bench.RECIPES["tutored"], "league.self_play=0.25"])
    assert sparring.league.self_play == 0.25 and tutored.league.self_play == 0 and sparring.ppo.teacher == "ace3"
    # ... and the runs with the teacher left out of the defence were ``--recipe sparring`` with one --set.
    guarded = league_config(bench.RECIPES["guarded"])
    assert guarded == league_config([*bench.RECIPES["sparring"], "ppo.teacher_off_tti_s=15"])
    assert guarded.ppo.teacher_off_tti_s == 15.0 and sparring.ppo.teacher_off_tti_s == 0.0


def test_a_taught_recipe_runs_without_its_teacher_as_the_bench_documents(monkeypatch):
    # learn_league's docstring: ``--set ppo.teacher= --set ppo.teacher_coef=0`` drops the teacher
    # of a taught recipe; the weight alone is refused at the boundary with the reason.
    bench = league_bench(monkeypatch)
    assert "--set ppo.teacher= --set ppo.teacher_coef=0" in bench.__doc__

    untaught = league_config([*bench.RECIPES["anchored"], "ppo.teacher=", "ppo.teacher_coef=0"])
    assert untaught.ppo.teacher == "" and untaught.ppo.teacher_coef == 0
    with pytest.raises(Exception, match="teacher 'ace' is named but teacher_coef is 0"):
        league_config([*bench.RECIPES["anchored"], "ppo.teacher_coef=0"])
