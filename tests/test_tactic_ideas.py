"""The tactic library, each tactic's idea: on hand-built observations, then in the simulator
against a scripted enemy."""

from __future__ import annotations

import math

import torch

from agents import make_agent
from agents.tactics import (
    TRAINING_RANGES,
    BluffTactic,
    DragTactic,
    EarlyTactic,
    EnergyTactic,
    ExtendTactic,
    FleeTactic,
    HerdParams,
    HerdTactic,
    LateTactic,
    NotchTactic,
    PumpTactic,
    ReplyTactic,
    SniperTactic,
    SwitchTactic,
    TacticAgent,
    WanderTactic,
)
from agents.tactics.switch import SwitchParams
from agents.tactics.wander import WanderParams
from sim import BatchedSim, SimConfig
from sim.kernels import END_REASONS
from sim.layout import (
    CLOSING_SCALE_MPS,
    MISSILE_SPEED_SCALE_MPS,
    RANGE_SCALE_M,
    ObsLayout,
)
from sim.reach.missile import SPENT_SPEED_MPS, missile_tables
from sim.reach.spacetime import own_reach_straight, own_reach_turning_away
from tests.test_agents import make_obs

LAYOUT = ObsLayout.from_config(SimConfig())  # the layout of make_obs


def inbound(bearing_deg: list[float], range_m: float = 8_000.0, closing_mps: float = 800.0,
            speed_mps: float = 900.0) -> dict[str, list[float]]:
    """Fields of one inbound missile seen at each of the bearings (degrees, > 0 on the left)."""
    rad = [math.radians(b) for b in bearing_deg]
    n = len(rad)
    return {"incoming__0__present": [1.0] * n, "incoming__0__range": [range_m / RANGE_SCALE_M] * n,
            "incoming__0__closing_speed": [closing_mps / CLOSING_SCALE_MPS] * n,
            "incoming__0__speed": [speed_mps / MISSILE_SPEED_SCALE_MPS] * n,
            "incoming__0__bearing_cos": [math.cos(r) for r in rad],
            "incoming__0__bearing_sin": [math.sin(r) for r in rad]}


def rudder(actions: torch.Tensor) -> list[int]:
    return (actions[:, 0] - 1).tolist()


# ---------------------------------------------------------------- each idea, by hand


def test_notch_holds_an_inbound_missile_on_the_beam():
    # Missile on the left at 30°, 90°, 120°: turn right to move it aft, hold, turn left.
    obs = make_obs(3, **inbound([30.0, 90.0, 120.0]))
    assert rudder(NotchTactic(3, LAYOUT).act(obs)) == [-1, 0, 1]
    # A spent missile is not worth beaming: pursuit (enemy dead ahead, no rudder) and a shot.
    spent = make_obs(1, **inbound([30.0], speed_mps=250.0))
    assert rudder(NotchTactic(1, LAYOUT).act(spent)) == [0]


def test_sniper_fires_only_inside_the_no_escape_reach():
    tables = missile_tables(SimConfig()).to("cpu", torch.float32)
    ranges = torch.linspace(2_000, 40_000, 96)
    obs = make_obs(96, enemy__range=(ranges / RANGE_SCALE_M).tolist())
    fire = SniperTactic(96, LAYOUT).act(obs)[:, 2].bool()
    no_escape = own_reach_turning_away(obs, LAYOUT, tables).float()
    straight = own_reach_straight(obs, LAYOUT, tables).float()
    assert bool(fire.any()) and bool((ranges[fire] <= 0.95 * no_escape[fire] + 1).all())
    # A shooter at the full straight reach would have fired from further out.
    assert float(straight[0]) > float(no_escape[0]) + 1_000
    assert not bool(fire[ranges > no_escape].any())


def test_late_shooter_holds_fire_until_deep_inside_the_reach():
    tables = missile_tables(SimConfig()).to("cpu", torch.float32)
    obs = make_obs(1)
    reach = float(own_reach_straight(obs, LAYOUT, tables))
    ranges = [0.8 * reach, 0.45 * reach]
    fire = LateTactic(2, LAYOUT).act(make_obs(2, enemy__range=[r / RANGE_SCALE_M for r in ranges]))[:, 2]
    assert fire.tolist() == [0, 1]


def test_pump_turns_cold_inside_the_enemy_reach_with_nothing_in_the_air():
    # No missiles left, so no shot: 15 km head-on is inside the enemy's reach, 60 km is not.
    obs = make_obs(2, own__missiles_left=0.0, enemy__range=[15e3 / RANGE_SCALE_M, 60e3 / RANGE_SCALE_M],
                   enemy__bearing_cos=[math.cos(0.3)] * 2, enemy__bearing_sin=[math.sin(0.3)] * 2)
    turn = rudder(PumpTactic(2, LAYOUT).act(obs))
    assert turn == [-1, 1]  # enemy on the left: turn right to put it behind; far out: pursue


def test_extend_keeps_running_where_pump_turns_back_in():
    # Nothing left to fire, the enemy 170° off the nose (cold, on the left), at twice the enemy's
    # no-escape reach: past pump's re-commit (1.6 of it), short of extend's (3.0).
    probe = make_obs(1, own__missiles_left=0.0, enemy__bearing_cos=[math.cos(math.radians(170))],
                     enemy__bearing_sin=[math.sin(math.radians(170))])
    reach = float(PumpTactic(1, LAYOUT).enemy_reach_m(probe, hot=True, escape=True))
    obs = probe.clone()
    obs[:, LAYOUT.index("enemy.range")] = 2.0 * reach / RANGE_SCALE_M
    assert rudder(PumpTactic(1, LAYOUT).act(obs)) == [1]  # back in: towards the enemy on the left
    assert rudder(ExtendTactic(1, LAYOUT).act(obs)) == [-1]  # still running: put it dead behind


def test_early_defender_turns_cold_before_the_enemy_fires():
    obs = make_obs(2, own__fire_ready=0.0, enemy__range=[15e3 / RANGE_SCALE_M] * 2,
                   enemy__bearing_cos=[math.cos(0.2)] * 2, enemy__bearing_sin=[math.sin(0.2)] * 2,
                   enemy__nose_on_cos=[1.0, 0.0])
    assert rudder(EarlyTactic(2, LAYOUT).act(obs)) == [-1, 1]  # pointed at: leave; not: pursue


def test_bluff_fires_from_outside_the_reach_and_keeps_its_reserve_for_a_real_shot():
    tables = missile_tables(SimConfig()).to("cpu", torch.float32)
    reach = float(own_reach_straight(make_obs(1), LAYOUT, tables))
    ranges = [1.5 * reach, 2.5 * reach, 0.8 * reach]
    # Six missiles left (the default), reserve 2, bluffs from up to 2 reaches: the shot from
    # 1.5 reaches goes, the one from 2.5 does not, and so does one well inside the reach.
    full = make_obs(3, enemy__range=[r / RANGE_SCALE_M for r in ranges])
    assert BluffTactic(3, LAYOUT).act(full)[:, 2].tolist() == [1, 0, 1]
    # Down to the reserve (two of six): only the shot inside the reach (0.85 of it) goes.
    reserve = make_obs(3, enemy__range=[r / RANGE_SCALE_M for r in ranges], own__missiles_left=2 / 6)
    assert BluffTactic(3, LAYOUT).act(reserve)[:, 2].tolist() == [0, 0, 1]


def test_reply_answers_a_live_inbound_missile_from_farther_than_it_fires_first():
    tables = missile_tables(SimConfig()).to("cpu", torch.float32)
    reach = float(own_reach_straight(make_obs(1), LAYOUT, tables))
    ranges = [0.6 * reach, 0.8 * reach, 0.95 * reach, 1.1 * reach]
    # Nothing inbound: only the shot deep inside the reach (its default 0.7 of it) goes.
    quiet = make_obs(4, enemy__range=[r / RANGE_SCALE_M for r in ranges])
    assert ReplyTactic(4, LAYOUT).act(quiet)[:, 2].tolist() == [1, 0, 0, 0]
    # An enemy missile far off (60 s to impact, no need to defend yet), seen dead ahead: every
    # shot inside the reach (its default reply_fraction 1.0) answers it, the one beyond does not.
    far = inbound([0.0] * 4, range_m=48_000.0, closing_mps=800.0)
    answered = ReplyTactic(4, LAYOUT).act(make_obs(4, enemy__range=[r / RANGE_SCALE_M for r in ranges], **far))
    assert answered[:, 2].tolist() == [1, 1, 1, 0]
    assert rudder(answered) == [0, 0, 0, 0]  # still pointing at the enemy, not yet defending
    # A spent missile is no threat and asks no answer.
    spent = inbound([0.0] * 4, range_m=48_000.0, speed_mps=250.0)
    quiet_again = ReplyTactic(4, LAYOUT).act(make_obs(4, enemy__range=[r / RANGE_SCALE_M for r in ranges], **spent))
    assert quiet_again[:, 2].tolist() == [1, 0, 0, 0]


def test_energy_keeper_turns_less():
    obs = make_obs(1, enemy__bearing_cos=[math.cos(math.radians(6))],
                   enemy__bearing_sin=[math.sin(math.radians(6))])
    assert rudder(EnergyTactic(1, LAYOUT).act(obs)) == [0]  # 6° is inside its dead band
    assert rudder(DragTactic(1, LAYOUT).act(obs)) == [1]  # plain pursuit turns


def test_flee_runs_inside_the_enemy_reach_turns_in_outside_it_and_never_fires():
    # 15 km head-on is inside the enemy's reach: turn right, away from it on the left; 60 km is
    # outside: turn in. Neither fires, though both are shots another tactic would take.
    obs = make_obs(2, enemy__range=[15e3 / RANGE_SCALE_M, 60e3 / RANGE_SCALE_M],
                   enemy__bearing_cos=[math.cos(0.3)] * 2, enemy__bearing_sin=[math.sin(0.3)] * 2)
    actions = FleeTactic(2, LAYOUT).act(obs)
    assert rudder(actions) == [-1, 1] and actions[:, 2].tolist() == [0, 0]


def test_flee_bends_its_run_near_the_arena_edge():
    # The enemy dead behind at 15 km, flying +x: in the middle and at the far (-x) edge the run
    # goes straight on; 3 % of the half width from the +x edge it turns off the wall.
    obs = make_obs(3, enemy__range=[15e3 / RANGE_SCALE_M] * 3, enemy__bearing_cos=[-1.0] * 3,
                   enemy__bearing_sin=[0.0] * 3, own__x=[0.0, -0.97, 0.97])
    turn = rudder(FleeTactic(3, LAYOUT).act(obs))
    assert turn[:2] == [0, 0] and turn[2] != 0


# ---------------------------------------------------------------- each idea, in the simulator


def _duel(red: str | TacticAgent, blue: str, n: int, steps: int, config: SimConfig):
    """(sim, red's observation before the step, the step's result) for ``steps`` decisions;
    ``red`` a spec or an agent built for ``n`` environments."""
    sim = BatchedSim(n, config, seed=0)
    agents = [s if isinstance(s, TacticAgent) else make_agent(s, n, sim.layout, sim_config=config)
              for s in (red, blue)]
    obs = sim.reset()
    for _ in range(steps):
        before = obs[:, 0].clone()
        out = sim.step(torch.stack([agents[0].act(obs[:, 0]), agents[1].act(obs[:, 1])], dim=1))
        obs = out.obs
        yield sim, before, out


def test_notch_holds_the_shooters_missile_near_the_beam_in_the_simulator():
    # Head-on against the shooter (which fires once in reach): from the moment the threat is
    # within notch's 25 s, the missile sits on its beam, off by a whole-rudder swing at most.
    off_nose = []
    for sim, red, out in _duel("tactic:notch", "shooter", 4, 200, SimConfig(scenario="head_on")):
        col = sim.layout.index
        present = red[:, col("incoming[0].present")] == 1
        tti = red[:, col("incoming[0].range")] * RANGE_SCALE_M / (
            red[:, col("incoming[0].closing_speed")] * CLOSING_SCALE_MPS).clamp_min(1e-3)
        angle = torch.rad2deg(torch.atan2(red[:, col("incoming[0].bearing_sin")].abs(),
                                          red[:, col("incoming[0].bearing_cos")]))
        if bool((present & (tti < 20)).all()):
            off_nose.append(angle)
        if bool(out.done.any()):
            break
    held = torch.stack(off_nose[6:])  # after the turn onto the beam (3 s)
    assert len(off_nose) > 10
    assert abs(float(held.median()) - 90) < 8 and float(held.min()) > 70 and float(held.max()) < 110


def test_ladder_has_two_missiles_in_the_air_and_skate_leaves_after_its_shot():
    ladder_two, skate_away = False, False
    for sim, red, out in _duel("tactic:ladder", "straight", 8, 60, SimConfig(scenario="head_on")):
        ladder_two |= bool((red[:, sim.layout.index("own_missile[1].present")] == 1).any())
        if bool(out.done.any()):
            break
    for sim, red, out in _duel("tactic:skate", "straight", 8, 60, SimConfig(scenario="head_on")):
        flying = red[:, sim.layout.index("own_missile[0].present")] == 1
        cold = red[:, sim.layout.index("enemy.bearing_cos")] < math.cos(math.radians(120))
        skate_away |= bool((flying & cold).all())
        if bool(out.done.any()):
            break
    assert ladder_two and skate_away


def test_reply_fires_back_within_seconds_of_the_shooters_launch_in_the_simulator():
    # Head on from 80 km against the shooter (which fires once in reach): reply holds its first
    # shot for deeper inside the reach, so in every environment the shooter fires first and
    # reply's first launch follows it within a few seconds (a decision is 0.5 s).
    config = SimConfig(scenario="head_on", head_on_separation_m=80_000.0)
    first: dict[str, list[int]] = {"red": [-1] * 8, "blue": [-1] * 8}
    for step, (_, _, out) in enumerate(_duel("tactic:reply", "shooter", 8, 200, config)):
        for side, who in ((0, "red"), (1, "blue")):
            for env in out.launches[:, side].nonzero().flatten().tolist():
                if first[who][env] < 0:
                    first[who][env] = step
        if min(first["red"]) >= 0 or bool(out.done.any()):
            break
    assert min(first["blue"]) >= 0 and min(first["red"]) >= 0
    assert all(0 < red - blue <= 10 for red, blue in zip(first["red"], first["blue"], strict=True))


def _most_in_flight(herd: HerdTactic) -> int:
    """The most own missiles ``herd`` (red) has in the air at once, head on against ``straight``."""
    most = 0
    for _, red, out in _duel(herd, "straight", herd.num_envs, 120, SimConfig(scenario="head_on")):
        most = max(most, int(herd.own_in_flight(red).max()))
        if bool(out.done.any()):
            break
    return most


def test_herd_keeps_as_many_long_shots_in_the_air_as_it_is_allowed():
    layout = ObsLayout.from_config(SimConfig(scenario="head_on"))
    assert _most_in_flight(HerdTactic(4, layout, sim_config=SimConfig(scenario="head_on"))) == 2  # its default
    one = HerdTactic(4, layout, sim_config=SimConfig(scenario="head_on"), params=HerdParams(max_in_flight=1.0))
    assert _most_in_flight(one) == 1


def test_flee_never_fires_and_stays_inside_the_arena_against_the_shooter():
    # Random starts: the shooter runs some of them down; none leaves the arena (without the
    # edge bend every one of these 16 does), and none is fired on by flee.
    first_end: dict[int, tuple[int, str]] = {}
    launched = 0
    for _, _, out in _duel("tactic:flee", "shooter", 16, 600, SimConfig()):
        launched += int(out.launches[:, 0].sum())
        for env in out.done.nonzero().flatten().tolist():
            first_end.setdefault(env, (int(out.winner[env]), END_REASONS[int(out.end_reason[env])]))
        if len(first_end) == 16:
            break
    assert launched == 0 and len(first_end) == 16
    assert all(reason != "out_of_arena" for _, reason in first_end.values())
    assert any(reason == "time_limit" for _, reason in first_end.values())


def test_switch_flies_its_members_in_turn_and_each_switch_changes_the_tactic():
    # Every decision is exactly the chosen member's; in 300 s (mean hold 30 s) every environment
    # that lasts switches, and no segment repeats the one before it. Members fly their training ranges only.
    config = SimConfig()
    sim = BatchedSim(16, config, seed=3)
    switch = SwitchTactic(16, sim.layout, sim_config=config, seed=4, params=SwitchParams(mean_hold_s=30.0))
    crank = make_agent("crank", 16, sim.layout, sim_config=config)
    assert [m.draw for m in switch.members] == [TRAINING_RANGES[m.name] for m in switch.members]
    # every idea of its day (reply came later and is left out, so that switch's draws replay)
    assert {m.name for m in switch.members} == set(TRAINING_RANGES) - {"switch", "wander", "reply"}
    assert (switch.plan[:, 1:] != switch.plan[:, :-1]).all()
    obs, flown, first = sim.reset(), [set() for _ in range(16)], torch.ones(16, dtype=torch.bool)
    for _ in range(150):
        member = switch.member(obs[:, 0])
        own = switch.act(obs[:, 0])
        theirs = torch.stack([m.act(obs[:, 0]) for m in switch.members], 1)
        assert torch.equal(own, theirs[torch.arange(16), member])
        for env in first.nonzero().flatten().tolist():
            flown[env].add(int(member[env]))
        out = sim.step(torch.stack([own, crank.act(obs[:, 1])], 1))
        obs, first = out.obs, first & ~out.done
        switch.reset(out.done)
    assert sum(len(f) > 1 for f in flown) >= 10  # within each environment's first episode
    ends, choice = switch.ends_s.clone(), switch.plan.clone()
    mask = torch.arange(16) % 5 == 0
    switch.reset(mask)
    assert torch.equal((switch.ends_s != ends).any(1), mask) and torch.equal(switch.plan[~mask], choice[~mask])


def test_wander_holds_each_segments_turn_closes_in_the_others_and_fires_only_inside_its_reach():
    # Outside a drag, every decision is the segment's rudder, or pursuit in a closing segment; every
    # shot is inside launch_fraction of the reach with no own missile in the air. Over 150
    # decisions both kinds of segment fly and shots go; a reset redraws only the masked schedules.
    config = SimConfig()
    sim = BatchedSim(16, config, seed=3)
    wander = WanderTactic(16, sim.layout, sim_config=config, seed=4, params=WanderParams(mean_hold_s=10.0))
    crank = make_agent("crank", 16, sim.layout, sim_config=config)
    share = float(torch.isnan(wander.plan).float().mean())
    assert 0.35 < share < 0.65  # pursue_share 0.5
    assert set(wander.plan[~torch.isnan(wander.plan)].unique().tolist()) == {-1.0, 0.0, 1.0}
    obs, seen_held, seen_closing, shots = sim.reset(), False, False, 0
    for _ in range(150):
        own_obs = obs[:, 0]
        turn = wander.segment_plan(own_obs)
        tti = wander.threat(own_obs, SPENT_SPEED_MPS)[0]
        calm = tti >= wander.param("defend_tti_s")
        own = wander.act(own_obs)
        held = calm & ~torch.isnan(turn)
        closing = calm & torch.isnan(turn)
        assert torch.equal(own[held, 0] - 1, turn[held].long())
        assert torch.equal(own[closing, 0] - 1, wander.pursuit(own_obs)[closing].long())
        fired = own[:, 2] == 1
        assert bool((wander.range_m(own_obs)[fired] <= 0.8 * wander.reach_m(own_obs)[fired] + 1.0).all())
        assert bool((wander.own_in_flight(own_obs)[fired] == 0).all())
        seen_held, seen_closing = seen_held or bool(held.any()), seen_closing or bool(closing.any())
        shots += int(fired.sum())
        out = sim.step(torch.stack([own, crank.act(obs[:, 1])], 1))
        obs = out.obs
        wander.reset(out.done)
    assert seen_held and seen_closing and shots > 0
    ends, plan = wander.ends_s.clone(), wander.plan.clone()
    mask = torch.arange(16) % 5 == 0
    wander.reset(mask)
    assert torch.equal((wander.ends_s != ends).any(1), mask)
    assert torch.equal(wander.plan[~mask].nan_to_num(9.0), plan[~mask].nan_to_num(9.0))
