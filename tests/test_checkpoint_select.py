"""Checkpoint selection (``pipeline.evaluation.selection``, ``python -m pipeline.select``): the
run's checkpoint with the highest worst win rate against its training opponents, never judged
against a held-out tactic."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from agents.tactics import HELDOUT, TRAINING
from agents.tactics.split import meets_heldout
from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import read_checkpoint, save_checkpoint
from pipeline import evaluate as evaluate_cli
from pipeline import select as select_cli
from pipeline.evaluation.selection import Candidate, check_validation_opponents, pick, validate
from sim.config import SimConfig
from sim.layout import ObsLayout

ACE = Path(__file__).resolve().parents[1] / "agents" / "champions" / "ace.pt"


def _untrained(folder: Path, agent_steps: int) -> Path:
    """A numbered checkpoint of an untrained network for the default sim."""
    layout = ObsLayout.from_config(SimConfig()).metadata()
    learner = PPOLearner(PPOConfig(hidden_sizes=(16,)), layout["size"],
                         ActionSpec("multi_discrete", nvec=(3, 3, 2)), obs_layout=layout)
    return save_checkpoint(folder, learner, extra={"agent_steps": agent_steps}, keep_last=1000)


def _run(tmp_path: Path, ace_first: bool, anchors: str = '["crank", "random"]') -> Path:
    """A run folder with two numbered checkpoints, ``ace`` and an untrained network (in either
    order), and a config naming its league anchors."""
    run = tmp_path / "run"
    folder = run / "checkpoints"
    weak = _untrained(folder, 1000)  # ckpt_000000000.pt: policy version 0
    strong = folder / ("ckpt_000000000.pt" if ace_first else "ckpt_000000001.pt")
    if ace_first:
        weak = weak.rename(folder / "ckpt_000000001.pt")
    shutil.copy(ACE, strong)
    (run / "config.toml").write_text(f"[league]\nanchors = {anchors}\n")
    return run


def test_no_held_out_tactic_or_parameter_can_validate():
    assert not any(meets_heldout(s) for s in TRAINING)
    assert all(meets_heldout(s) for s in HELDOUT)
    for spec in ("tactic:pump", "tactic:pump?random", "tactic:pump?train&launch_fraction=0.7",
                 "tactic:skate?train", "tactic:notch"):
        assert meets_heldout(spec), spec
    for spec in ("crank", "straight", "runs/x/checkpoints/latest.pt", " tactic:pump?train "):
        assert not meets_heldout(spec), spec
    with pytest.raises(ValueError, match="'tactic:pump\\?heldout' could show the candidates a held-out"):
        check_validation_opponents(["crank", "tactic:pump?heldout"])
    with pytest.raises(ValueError, match="no validation opponents"):
        check_validation_opponents([" ", ""])
    assert check_validation_opponents(["crank", " crank", "random"]) == ["crank", "random"]


def test_the_pick_is_the_highest_worst_win_rate_then_the_mean():
    a = Candidate(Path("a"), 1, {"x": 0.9, "y": 0.5})
    b = Candidate(Path("b"), 2, {"x": 0.6, "y": 0.6})
    c = Candidate(Path("c"), 3, {"x": 0.7, "y": 0.6})
    assert pick([a, b, c]) is c and pick([a, b]) is b and pick([c, b, a]) is c
    assert c.weakest == "y" and c.worst == 0.6 and c.mean == pytest.approx(0.65)
    with pytest.raises(ValueError, match="no candidates"):
        pick([])


def test_candidates_meet_the_same_fights(tmp_path):
    path = _untrained(tmp_path, 1000)
    one, two = validate([path, path], ["random", "shooter"], episodes=4, seed=3)
    assert one.win_rates == two.win_rates and set(one.win_rates) == {"random", "shooter"}


@pytest.mark.parametrize("ace_first", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_the_command_keeps_the_stronger_checkpoint_wherever_it_is(tmp_path, capsys, ace_first):
    run = _run(tmp_path, ace_first)
    out = select_cli.main([str(run), "--from", "0", "--episodes", "8"])
    assert out == run / "checkpoints" / "selected.pt"
    printed = capsys.readouterr().out
    assert "2 candidate(s)" in printed and "crank, random" in printed, printed
    kept = "ckpt_000000000.pt" if ace_first else "ckpt_000000001.pt"
    assert re.search(rf"{kept}.*<- kept", printed), printed
    state = read_checkpoint(out)
    assert state["kind"] == "policy" and state["extra"]["selected"]["checkpoint"] == kept
    rates = {c["checkpoint"]: c["win_rates"] for c in state["extra"]["selected"]["candidates"]}
    assert min(rates[kept].values()) > max(min(r.values()) for name, r in rates.items() if name != kept)
    payload = evaluate_cli.main(["--agent", str(out), "--opponents", "straight", "--episodes", "2"])
    assert payload["matches"][0]["episodes"] == 2


@pytest.mark.parametrize(("argv", "message"), [
    (["{run}", "--opponents", "crank,tactic:skate?heldout"], "could show the candidates a held-out tactic"),
    (["{run}", "--opponents", "tactic:pump"], "could show the candidates a held-out tactic"),
    (["{run}", "--episodes", "0"], "--episodes must be at least 1"),
    (["{run}", "--last", "0"], "--last must be at least 1"),
    (["{run}", "--from", "1.5"], r"--from must be in \[0, 1\]"),
    (["{run}", "--out", "{run}/no/such/a.pt"], "give a file name in an existing folder"),
    (["{run}", "--device", "tpu"], "not a device"),
    (["{tmp}"], "no numbered checkpoints"),
])
def test_bad_input_is_one_line_and_exit_status_2(tmp_path, capsys, argv, message):
    run = _run(tmp_path, ace_first=True)
    with pytest.raises(SystemExit) as exc:
        select_cli.run([a.format(run=run, tmp=tmp_path) for a in argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and re.search(message, err), err


def test_a_run_whose_anchors_hold_a_held_out_tactic_is_refused(tmp_path, capsys):
    run = _run(tmp_path, ace_first=True, anchors='["crank", "tactic:herd?heldout"]')
    with pytest.raises(SystemExit):
        select_cli.run([str(run), "--episodes", "2"])
    assert "'tactic:herd?heldout' could show the candidates" in capsys.readouterr().err
    (run / "config.toml").unlink()
    with pytest.raises(SystemExit):
        select_cli.run([str(run), "--episodes", "2"])
    assert "has no config.toml: give the validation opponents with --opponents" in capsys.readouterr().err
