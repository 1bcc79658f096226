"""The tactic library: the batch contract, seeded per-episode parameters, the spec syntax, the
training / held-out split, compiled tactics and where specs are accepted (each tactic's idea:
tests/test_tactic_ideas.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from agents import make_agent
from agents.tactics import (
    HELDOUT,
    HELDOUT_RANGES,
    TACTICS,
    TRAINING,
    TRAINING_RANGES,
    PumpTactic,
    parse_tactic_spec,
)
from agents.tactics.base import ScheduledTactic
from pipeline.config.errors import ConfigError
from pipeline.config.sections import LeagueConfig
from pipeline.config.validation import check_agent_spec
from sim import BatchedSim, SimConfig
from sim.layout import ObsLayout

LAYOUT = ObsLayout.from_config(SimConfig())  # the default layout
SPECS = [f"tactic:{name}{draw}" for name in TACTICS for draw in ("", "?random")]


# ---------------------------------------------------------------- the batch contract


@pytest.mark.parametrize("spec", SPECS)
def test_every_tactic_acts_on_a_batch_in_both_action_modes(spec):
    sim = BatchedSim(32, SimConfig(), seed=2)
    obs = sim.reset()[:, 1]
    disc = make_agent(spec, 32, LAYOUT, seed=5).act(obs)
    cont = make_agent(spec, 32, LAYOUT, seed=5, action_mode="continuous").act(obs)
    assert disc.shape == (32, 3) and disc.dtype == torch.int64
    assert cont.shape == (32, 3) and cont.dtype == torch.float32
    assert torch.equal(disc[:, 0] - 1, cont[:, 0].long())
    assert torch.equal(disc[:, 1], (cont[:, 1] * 2).long())
    assert torch.equal(disc[:, 2], cont[:, 2].long())


@pytest.mark.parametrize("name", list(TACTICS))
def test_random_parameters_follow_the_seed_and_stay_in_their_ranges(name):
    spec = f"tactic:{name}?random"
    a, b, c = (make_agent(spec, 64, LAYOUT, seed=s) for s in (7, 7, 8))
    assert torch.equal(a.values, b.values)
    assert not torch.equal(a.values, c.values)
    cls = TACTICS[name]
    for i, field in enumerate(dataclasses.fields(cls.params_type)):
        low, high = cls.ranges[field.name]
        column = a.values[:, i]
        assert float(column.min()) >= low - 1e-4 and float(column.max()) <= high + 1e-4
        assert float(column.max() - column.min()) > 0.2 * (high - low)  # really spread out
        default = getattr(cls.params_type(), field.name)
        assert low <= default <= high


@pytest.mark.parametrize("name", list(TACTICS))
def test_parameters_are_redrawn_only_on_reset_and_only_for_the_masked_envs(name):
    agent = make_agent(f"tactic:{name}?random", 16, LAYOUT, seed=3)
    fixed = make_agent(f"tactic:{name}", 16, LAYOUT, seed=3)
    before, fixed_before = agent.values.clone(), fixed.values.clone()
    obs = BatchedSim(16, SimConfig(), seed=1).reset()[:, 0]
    for _ in range(3):
        agent.act(obs)
    assert torch.equal(agent.values, before)
    mask = torch.zeros(16, dtype=torch.bool)
    mask[[2, 9]] = True
    agent.reset(mask)
    fixed.reset(mask)
    changed = (agent.values != before).any(dim=1)
    assert torch.equal(changed, mask)
    assert torch.equal(fixed.values, fixed_before)
    assert agent.generators()
    # a scheduled tactic (switch, wander) draws its schedule even with fixed parameters
    assert bool(fixed.generators()) == issubclass(TACTICS[name], ScheduledTactic)


def test_two_runs_with_one_seed_draw_the_same_episodes():
    def draws(seed: int) -> list[torch.Tensor]:
        agent = make_agent("tactic:pump?random", 8, LAYOUT, seed=seed)
        out = [agent.values.clone()]
        for k in range(4):
            agent.reset(torch.arange(8) % 4 == k)
            out.append(agent.values.clone())
        return out

    assert all(torch.equal(x, y) for x, y in zip(draws(1), draws(1), strict=True))


# ---------------------------------------------------------------- specs and the split


def test_specs_resolve_and_bad_ones_are_refused_in_one_line():
    for spec in [*SPECS, *TRAINING, *HELDOUT]:
        assert isinstance(make_agent(spec, 2, LAYOUT), TACTICS[spec[7:].partition("?")[0]])
    for spec, message in [
        ("tactic:kamikaze", "unknown tactic 'kamikaze' in 'tactic:kamikaze': expected one of pump, notch, "),
        ("tactic:pump?sometimes", "tactic spec 'tactic:pump?sometimes': after '?' expected one of random, train, "
                                  "heldout or PARAM=VALUE, got 'sometimes'"),
        ("tactic:pump?random&train", "tactic spec 'tactic:pump?random&train': at most one of random, train, heldout"),
        ("tactic:skate?wings=2", "tactic spec 'tactic:skate?wings=2': no parameter 'wings' (parameters: "),
        ("tactic:skate?defend_tti_s=99", "tactic spec 'tactic:skate?defend_tti_s=99': range defend_tti_s=(99.0, 99.0) "
                                         "must be ordered and inside its documented range (10.0, 40.0)"),
        ("tactic:skate?defend_tti_s=40:30", "tactic spec 'tactic:skate?defend_tti_s=40:30': range defend_tti_s="),
        ("tactic:skate?defend_tti_s=nan", "tactic spec 'tactic:skate?defend_tti_s=nan': 'defend_tti_s=nan' must be "
                                          "PARAM=VALUE or PARAM=LOW:HIGH with numbers"),
        ("tactic:sniper?train", "tactic spec 'tactic:sniper?train': sniper has no train ranges (it has: random, "
                                "heldout)"),
    ]:
        with pytest.raises(ValueError) as err:
            make_agent(spec, 2, LAYOUT)
        assert str(err.value).startswith(message) and "\n" not in str(err.value)
        with pytest.raises(ConfigError, match="^league.anchors: " + message.replace("?", r"\?")[:30]):
            check_agent_spec("league.anchors", spec)
    check_agent_spec("league.anchors", "tactic:pump?train")  # accepted
    assert make_agent("crank", 2, LAYOUT).__class__.__name__ == "CrankAgent"  # plain names unchanged


def test_a_spec_fixes_a_parameter_or_narrows_its_draw():
    fixed = make_agent("tactic:skate?defend_tti_s=35", 64, LAYOUT)
    assert torch.equal(fixed.param("defend_tti_s"), torch.full((64,), 35.0))
    assert torch.equal(fixed.param("leave_angle_deg"), torch.full((64,), 150.0))  # the rest: defaults
    narrowed = make_agent("tactic:skate?heldout&defend_tti_s=30:40&leave_angle_deg=170", 64, LAYOUT, seed=3)
    tti = narrowed.param("defend_tti_s").clone()
    assert bool(((tti >= 30.0) & (tti <= 40.0)).all()) and float(tti.std()) > 1.0
    assert torch.equal(narrowed.param("leave_angle_deg"), torch.full((64,), 170.0))
    launch = narrowed.param("launch_fraction")  # still the held-out draw
    lo, hi = HELDOUT_RANGES["skate"]["launch_fraction"]
    assert bool(((launch >= lo) & (launch <= hi)).all()) and float(launch.std()) > 0.01
    narrowed.reset(torch.ones(64, dtype=torch.bool))
    assert not torch.equal(narrowed.param("defend_tti_s"), tti)  # redrawn per episode
    assert torch.equal(narrowed.param("leave_angle_deg"), torch.full((64,), 170.0))
    assert parse_tactic_spec("tactic:pump?train")[1] is TRAINING_RANGES["pump"]  # the split itself


def test_heldout_specs_never_meet_training_ones():
    assert not set(TRAINING) & set(HELDOUT)
    only_heldout = set(HELDOUT_RANGES) - set(TRAINING_RANGES)
    assert only_heldout and set(TRAINING_RANGES) - set(HELDOUT_RANGES)
    for name in set(TRAINING_RANGES) & set(HELDOUT_RANGES):
        train, held = TRAINING_RANGES[name], HELDOUT_RANGES[name]
        assert set(train) == set(held) == set(TACTICS[name].ranges), name
        for param in train:
            (a, b), (c, d) = train[param], held[param]
            assert b < c or d < a, (name, param, train[param], held[param])
    for param, (a, b) in TRAINING_RANGES["extend"].items():  # pump's rule, wider: disjoint from it too
        c, d = HELDOUT_RANGES["pump"][param]
        assert b < c or d < a, ("extend", param)
    for split in (TRAINING_RANGES, HELDOUT_RANGES):
        for name, ranges in split.items():
            for param, (low, high) in ranges.items():
                full = TACTICS[name].ranges[param]
                assert full[0] <= low < high <= full[1], (name, param)


def test_the_league_default_anchors_hold_no_heldout_tactic():
    for anchor in LeagueConfig().anchors:
        assert anchor not in HELDOUT
        if anchor.startswith("tactic:"):
            cls, draw = parse_tactic_spec(anchor)
            assert cls.name not in set(HELDOUT_RANGES) - set(TRAINING_RANGES), anchor
            assert draw is TRAINING_RANGES[cls.name], anchor


# ---------------------------------------------------------------- compiled


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TACTICS))
def test_a_compiled_tactic_acts_exactly_as_its_eager_twin(name):
    sim = BatchedSim(64, SimConfig(), seed=4)
    obs = sim.reset().clone()
    spec = f"tactic:{name}?random"
    eager = make_agent(spec, 64, LAYOUT, seed=9)
    compiled = make_agent(spec, 64, LAYOUT, seed=9).compile()
    other = make_agent("crank", 64, LAYOUT)
    fired, resets, turns = 0, 0, set()
    with torch.no_grad():
        for _ in range(620 if name == "flee" else 400):  # crank seldom catches flee: to the time limit
            a = eager.act(obs[:, 1])
            assert torch.equal(compiled.act(obs[:, 1]), a)
            fired += int(a[:, 2].sum())
            turns |= set(a[:, 0].tolist())
            out = sim.step(torch.stack([other.act(obs[:, 0]), a], 1))
            obs = out.obs.clone()
            resets += int(out.done.sum())
            eager.reset(out.done)
            compiled.reset(out.done)
            other.reset(out.done)
    # Launches (none from flee, which never fires), both turns and redrawn parameters took part.
    assert (fired == 0 if name == "flee" else fired > 0) and resets > 0 and {0, 2} <= turns


@pytest.mark.slow
def test_one_process_compiles_more_agent_kinds_than_dynamos_default_limit():
    # A league with the tactic library as anchors compiles ten or more kinds of scripted agent
    # in each actor process; past Dynamo's default of 8 versions of one function the rest ran
    # eagerly ("Dynamo recompile limit exceeded"). Every kind must run its compiled form.
    from torch._dynamo.utils import counters

    specs = ["crank", "shooter", "pursuit", "straight", *TRAINING]
    assert len(specs) > 8
    obs = BatchedSim(16, SimConfig(), seed=2).reset()[:, 1].clone()
    counters.clear()
    with torch.no_grad():
        for spec in specs:
            eager = make_agent(spec, 16, LAYOUT, seed=3)
            compiled = make_agent(spec, 16, LAYOUT, seed=3).compile()
            assert torch.equal(compiled.act(obs), eager.act(obs)), spec
    assert not [k for k in counters["unimplemented"] if "recompile limit" in k.lower()]


# ---------------------------------------------------------------- where specs are accepted


def test_midrange_env_flies_against_a_randomised_tactic():
    import gymnasium

    import sim  # noqa: F401  (registers Midrange-v0)

    env = gymnasium.make("Midrange-v0", opponent="tactic:pump?random")
    env.reset(seed=1)
    assert isinstance(env.unwrapped.opponent, PumpTactic)  # type: ignore[attr-defined]
    for _ in range(5):
        env.step(env.action_space.sample())
    with pytest.raises(ValueError, match=r"^Midrange-v0 opponent 'tactic:nope': unknown tactic 'nope'"):
        gymnasium.make("Midrange-v0", opponent="tactic:nope")


@pytest.mark.slow
def test_a_league_with_tactic_anchors_trains_and_records_them(tmp_path):
    from pipeline.launch import main

    anchors = ["tactic:drag?train", "tactic:ladder?train"]
    # 30-s episodes: about three per environment, against whichever anchor its group drew.
    argv = ["--actors", "1", "--envs-per-actor", "8", "--rollout-len", "8", "--total-steps", str(8 * 8 * 24),
            "--set", "sim.max_time_s=30",
            "--opponent", "league", "--set", f"league.anchors={anchors}", "--set", "league.groups_per_actor=2",
            "--reward", "outcome", "--device", "cpu", "--display", "none", "--run-dir", str(tmp_path / "run"),
            "--set", "run.eval_episodes=0", "--set", "ppo.hidden_sizes=[16, 16]", "--actor-processes", "off"]
    assert main(argv) == 0
    saved = json.loads((tmp_path / "run" / "league" / "league.json").read_text())
    assert saved["anchors"] == anchors
    assert sum(sum(saved["records"][a][k] for k in ("wins", "draws", "losses")) for a in anchors) > 0


def test_evaluate_plays_tactics_and_refuses_a_bad_spec_in_one_line(capsys):
    from pipeline.evaluate import main, run

    payload = main(["--agent", "tactic:late?heldout", "--opponents", "straight", "--episodes", "4"])
    assert payload["agent"] == "tactic:late?heldout"
    assert payload["matches"][0]["wins"] == 4  # straight never fires
    with pytest.raises(SystemExit) as exited:
        run(["--agent", "tactic:pumpp", "--opponents", "crank", "--episodes", "2"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown tactic 'pumpp' in 'tactic:pumpp': expected one of pump, ")
    assert err.count("\n") == 1
