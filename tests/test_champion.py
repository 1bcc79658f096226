"""The packaged champion ``ace`` (agents/champions): a small policy-only file of the current
observation layout, flown by name wherever an agent spec is taken (``--opponent``,
``pipeline.evaluate --agent``, a league anchor, ``Midrange-v0``), and refused in one line where
its layout is not the simulator's; and ``bench/package_champion.py``, which writes such files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import gymnasium
import pytest
import torch
from test_league_runs import league_argv
from test_policy_file import make_learner

from agents.champions import CHAMPIONS
from agents.grouped import GroupedOpponent
from agents.policy import PolicyAgent
from agents.registry import make_agent
from learner.checkpoint import load_policy, read_checkpoint, save_checkpoint
from learner.checkpoint.export import export_policy
from monitoring import Metrics
from pipeline import evaluate as evaluate_cli
from pipeline.config import resolve
from pipeline.config.flags import parse_config
from pipeline.config.specs import build_agent
from pipeline.envs.midrange import default_opponent
from pipeline.evaluation.entrants import check_entrants, trained_sim_config
from sim.config import SimConfig
from sim.layout import ObsLayout

ROOT = Path(__file__).resolve().parent.parent
ACE = CHAMPIONS["ace"]
LAYOUT = ObsLayout.from_config(SimConfig())
REACH = SimConfig(obs_reach=True)  # a simulator whose observations add the reach block
FEWER = SimConfig(obs_incoming_missiles=2)  # one that sees two inbound missiles instead of four


def own_layout(name: str) -> ObsLayout:
    """The observation layout today's code makes of the simulator champion ``name`` was trained on."""
    return ObsLayout.from_config(SimConfig.from_dict(read_checkpoint(CHAMPIONS[name])["extra"]["config"]["sim"]))


@pytest.mark.parametrize("name", list(CHAMPIONS))
def test_every_champion_is_a_small_policy_only_file_of_the_current_layout(name: str) -> None:
    path = CHAMPIONS[name]
    assert path.parent == ROOT / "agents" / "champions" and path.is_file() and path.stem == name
    assert path.stat().st_size < 400_000  # the policy alone: a 128×128 actor-critic is ~230–330 KB
    state = read_checkpoint(path)
    assert state["kind"] == "policy"
    assert not {"optimizer", "rng", "shuffle_rng", "config"} & set(state)
    assert state["obs_layout"] == own_layout(name).metadata()
    assert state["extra"]["agent_steps"] > 0
    assert "learn_league.py" in state["extra"]["note"]
    assert all(t.dtype in (torch.float32, torch.float64, torch.int64) for t in state["model"].values())


@pytest.mark.parametrize("name", list(CHAMPIONS))
def test_every_champion_flies_by_name_with_its_packaged_weights(name: str) -> None:
    layout = own_layout(name)
    agent = build_agent(name, 4, layout, seed=3, deterministic=True)
    assert isinstance(agent, PolicyAgent)
    policy = load_policy(CHAMPIONS[name])
    for mine, packaged in zip(agent.policy.state_dict().values(), policy.state_dict().values(), strict=True):
        assert torch.equal(mine, packaged)
    obs = torch.randn(4, layout.size)
    assert torch.equal(agent.act(obs), policy.act(obs, deterministic=True)[0])


def test_make_agent_without_a_loader_refuses_ace_in_one_line() -> None:
    with pytest.raises(ValueError) as err:
        make_agent("ace", 1, LAYOUT)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"agent 'ace' is a packaged policy ({ACE})")


def test_ace_is_refused_by_a_simulator_of_another_layout_in_one_line() -> None:
    layout = ObsLayout.from_config(FEWER)
    with pytest.raises(ValueError) as err:
        build_agent("ace", 1, layout, sim_config=FEWER)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"checkpoint {ACE} was trained on another observation layout: ")
    assert "missing now: incoming[2]." in text


def test_ace_flies_in_a_simulator_with_the_reach_block_reading_the_frame_before_it() -> None:
    layout = ObsLayout.from_config(REACH)
    without = build_agent("ace", 3, LAYOUT, sim_config=SimConfig(), deterministic=True)
    with_block = build_agent("ace", 3, layout, sim_config=REACH, deterministic=True)
    obs = torch.randn(3, LAYOUT.size).clamp(-1, 1)
    block = torch.randn(3, layout.size - LAYOUT.size)
    assert torch.equal(with_block.act(torch.cat([obs, block], 1)), without.act(obs))


def test_an_ace_file_of_another_layout_is_refused_in_one_line(tmp_path, monkeypatch) -> None:
    # The packaged file replaced by a policy trained on observations with the reach block.
    source = save_checkpoint(tmp_path / "checkpoints", make_learner(REACH))
    other = export_policy(source, tmp_path / "ace.pt", note="another layout")
    monkeypatch.setitem(CHAMPIONS, "ace", other)
    with pytest.raises(ValueError) as err:
        build_agent("ace", 1, LAYOUT, sim_config=SimConfig())
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"checkpoint {other} was trained on another observation layout: ")
    assert "missing now: reach." in text


@pytest.mark.slow
def test_evaluate_takes_ace_by_name_and_plays_as_its_file(tmp_path) -> None:
    def play(agent: str) -> dict:
        return evaluate_cli.main(["--agent", agent, "--opponents", "random", "--episodes", "8",
                                  "--seed", "5", "--json", str(tmp_path / "out.json")])
    by_name = play("ace")
    saved = json.loads((tmp_path / "out.json").read_text())
    by_file = play(str(ACE))
    assert by_name["matches"][0]["agent"] == "ace" and saved["matches"][0]["episodes"] == 8
    keys = ("wins", "draws", "losses")
    assert [by_name["matches"][0][k] for k in keys] == [by_file["matches"][0][k] for k in keys]


def test_ace_is_a_league_anchor(tmp_path) -> None:
    from pipeline.run.parts import build
    config = resolve(parse_config(league_argv(tmp_path, "--set", "league.anchors=['ace', 'crank']")), "cpu")
    parts = build(config, Metrics(), tmp_path / "run")
    assert parts.league is not None and parts.league.anchors == ["ace", "crank"]
    for actor in parts.actors:
        assert isinstance(actor.opponent, GroupedOpponent)
        assert all(isinstance(group["ace"], PolicyAgent) for group in actor.opponent.candidates)


def test_launch_refuses_ace_against_a_simulator_of_another_layout_in_one_line(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.launch", "--opponent", "ace", "--set", "sim.obs_incoming_missiles=2",
         "--actors", "1", "--envs-per-actor", "8", "--rollout-len", "8", "--total-steps", "64",
         "--display", "none", "--metrics-port", "-1", "--run-dir", str(tmp_path / "run")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert f"{ACE} was trained on another observation layout" in lines[0]


def _package(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "package_champion.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_package_champion_writes_a_policy_file_and_refuses_bad_input(tmp_path) -> None:
    source = save_checkpoint(tmp_path / "run" / "checkpoints", make_learner(SimConfig()), extra={"agent_steps": 512})
    done = _package(str(tmp_path / "run"), "--out", str(tmp_path / "ace.pt"), "--note", "trained by hand")
    assert done.returncode == 0, done.stderr
    size = (tmp_path / "ace.pt").stat().st_size
    assert re.search(rf"^RESULT name=ace bytes={size} sha256=[0-9a-f]{{64}} policy_version=0 agent_steps=512$",
                     done.stdout, re.M), done.stdout
    state = read_checkpoint(tmp_path / "ace.pt")
    assert state["extra"]["note"] == "trained by hand"
    assert all(torch.equal(state["model"][k], v) for k, v in read_checkpoint(source)["model"].items())
    for args, message in (
        ((str(tmp_path / "run"), "--name", "bob"), "error: --name 'bob' is no champion: expected one of ace"),
        ((str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.pt")), f"error: no checkpoint at {tmp_path / 'nowhere'}"),
    ):
        done = _package(*args)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(message), done.stderr
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.slow
def test_the_wheel_ships_every_champion(tmp_path) -> None:
    # A copy of the tree, so the build's own folders (build/, *.egg-info) stay out of the checkout.
    tree = tmp_path / "tree"
    for name in ("core", "sim", "agents", "rewards", "actors", "learner", "pipeline", "monitoring"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "build"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--no-index", "-w", str(tmp_path / "dist"), str(tree)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("midrange_rl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        for path in CHAMPIONS.values():
            assert archive.read(f"agents/champions/{path.name}") == path.read_bytes()
        assert "agents/champions/__init__.py" in archive.namelist()


@pytest.mark.parametrize(("options", "expected"), [
    ({}, "ace2"),
    ({"action_mode": "continuous"}, "crank"),
    ({"obs_reach": True}, "ace2"),  # reads the frame before the reach block
    ({"obs_incoming_missiles": 2}, "crank"),
])
def test_midrange_flies_the_champion_where_it_can_and_crank_elsewhere(options: dict, expected: str) -> None:
    env = gymnasium.make("Midrange-v0", **options)
    opponent = env.unwrapped.opponent  # type: ignore[attr-defined]
    assert default_opponent(SimConfig(**options)) == expected
    assert type(opponent).__name__ == {"ace2": "PolicyAgent", "crank": "CrankAgent"}[expected]
    if expected == "crank":  # named, ace is refused on such a simulator, in one line
        with pytest.raises(ValueError) as err:
            gymnasium.make("Midrange-v0", opponent="ace", **options)
        assert "\n" not in str(err.value) and str(err.value).startswith(f"Midrange-v0 opponent 'ace': checkpoint {ACE} ")


@pytest.mark.parametrize("name", ["ace3", "ace4", "ace5", "ace6"])
def test_the_reach_reading_champions_fly_the_sim_they_know_by_name_and_are_refused_by_the_default_in_one_line(
        name: str) -> None:
    """``ace3``, ``ace4``, ``ace5`` and ``ace6`` read the reach block and a trace: the evaluator and the cockpit give
    them that simulator by name (the others read the frame before them), ``Midrange-v0`` without
    them refuses them."""
    assert trained_sim_config(["ace2", "crank"]) == SimConfig().rules_start()
    config = trained_sim_config([name, "ace2", "crank"])
    assert config.obs_reach and config.obs_trace_s == 20.0
    check_entrants([name, "ace2", "ace", "crank"], config, "cpu")
    env = gymnasium.make("Midrange-v0", opponent=name, obs_reach=True, obs_trace_s=20.0)
    assert isinstance(env.unwrapped.opponent, PolicyAgent)  # type: ignore[attr-defined]
    assert env.reset(seed=0)[0].shape == (own_layout(name).size,)
    with pytest.raises(ValueError) as err:
        gymnasium.make("Midrange-v0", opponent=name)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"Midrange-v0 opponent '{name}': checkpoint {CHAMPIONS[name]} was trained on "
                                     "another observation layout")
