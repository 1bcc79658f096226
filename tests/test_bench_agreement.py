"""``bench/agreement.py``: how often a fighter picks its teacher's action, fight by fight."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from pipeline.config.specs import build_agent
from pipeline.evaluation.matches import play_first_episodes
from sim import BatchedSim, SimConfig
from tests.bench_scripts import BENCH, exit_code, load_bench


def test_a_fighter_agrees_with_itself_at_every_decision_of_every_fight():
    """``crank`` as its own teacher: every component agrees at every decision, and the decisions
    counted are the fights' lengths, from both sides."""
    agreement = load_bench("agreement")
    same, every, decisions = agreement.agreement("crank", "crank", "shooter", starts=8, seed=2)
    config = SimConfig()
    lengths = 0
    for side in (0, 1):  # the same starts, flown again to count their decisions
        sim = BatchedSim(8, config, device="cpu", seed=2)
        specs = ("crank", "shooter") if side == 0 else ("shooter", "crank")
        red, blue = (build_agent(s, 8, sim.layout, "cpu", seed=2 * 2 + i, sim_config=config).eval()
                     for i, s in enumerate(specs))
        torch.manual_seed(2 * 100_003 + side)
        lengths += int(play_first_episodes(sim, red, blue)["length_steps"].sum())
    assert decisions == lengths > 0
    assert every == decisions and same.tolist() == [decisions] * 3


def test_a_teacher_that_never_fires_is_not_followed_on_fire_and_the_result_line_says_so(capsys):
    """``pursuit`` never fires and ``crank`` does: they part on ``fire`` in some decisions, so
    fewer decisions agree in every component than in the throttle (both fly full throttle)."""
    agreement = load_bench("agreement")
    result = agreement.main(["--agent", "crank", "--teacher", "pursuit", "--opponents", "shooter,straight",
                             "--starts", "8", "--seed", "2"])
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    assert lines[-1] == (f"RESULT shooter={result['shooter']} straight={result['straight']} "
                         f"decisions={result['decisions']}")
    same, every, decisions = agreement.agreement("crank", "pursuit", "shooter", starts=8, seed=2)
    assert result["shooter"] == round(every / decisions, 4) < 1.0
    _, throttle, fire = same.tolist()
    assert every <= fire < decisions and throttle == decisions
    assert lines[0].startswith(f"shooter: {decisions} decisions; the teacher's action taken: rudder ")


@pytest.mark.parametrize("argv", [["--agent", "crank"],
                                  ["--agent", "crank", "--teacher", "pursuit", "--starts", "0"]])
def test_bad_arguments_are_refused(argv, capsys):
    assert exit_code("agreement", argv) == 2


def test_a_teacher_that_builds_no_agent_is_one_line_and_exit_2():
    proc = subprocess.run([sys.executable, str(BENCH / "agreement.py"), "--agent", "crank", "--teacher", "nosuch",
                           "--quick"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: unknown agent 'nosuch'") and proc.stderr.count("\n") == 1
    assert proc.stdout == ""
