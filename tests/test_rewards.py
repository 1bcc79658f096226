"""Rewards: presets, weighted sums, the spec registry, and the shaped reward's dense terms
staying small next to the outcome over whole simulated episodes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agents import make_agent
from rewards import (
    BaseReward,
    OutcomeReward,
    ShapedConfig,
    ShapedReward,
    WeightedSum,
    ZeroReward,
    make_reward,
    step_info,
)
from sim import BatchedSim, SimConfig
from sim.layout import ObsLayout

LAYOUT = ObsLayout.from_config(SimConfig())


@pytest.fixture
def one_thread():
    """Batched runs of small tensors go fastest, and share the machine best, on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def fake_step(n: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    obs_before = torch.rand(n, LAYOUT.size, generator=g)
    obs_after = torch.rand(n, LAYOUT.size, generator=g)
    action = torch.zeros(n, 3, dtype=torch.int64)
    k = torch.arange(n) % 4  # four kinds of step, repeated for larger n
    done = torch.tensor([False, True, False, True])[k]
    info = {
        "reward": torch.tensor([0.0, 1.0, 0.0, -1.0])[k], "terminated": done.clone(),
        "truncated": torch.zeros(n, dtype=torch.bool), "winner": torch.tensor([-1, 0, -1, 1])[k],
        "end_reason": torch.tensor([0, 1, 0, 1])[k], "launches": torch.tensor([1, 0, 0, 2])[k],
        "hits": torch.tensor([0, 1, 0, 0])[k],
    }
    return obs_before, obs_after, action, done, info


class Fuel(BaseReward):
    """A user reward loaded by import path: −1 per launch."""

    def compute(self, obs_before, obs_after, action, done, info):
        return -info["launches"].float()


def test_zero_and_outcome():
    args = fake_step()
    assert ZeroReward().compute(*args).tolist() == [0.0] * 4
    assert OutcomeReward().compute(*args).tolist() == [0.0, 1.0, 0.0, -1.0]


def test_draw_prices_only_episodes_that_end_in_a_draw():
    obs_before, obs_after, action, _, info = fake_step()
    done = torch.tensor([True, True, False, True])
    info["winner"] = torch.tensor([2, 0, 2, 1])  # a draw, a win, a draw not ended, a loss
    assert make_reward("draw").compute(obs_before, obs_after, action, done, info).tolist() == [1.0, 0.0, 0.0, 0.0]
    priced = make_reward("outcome+-0.5*draw").compute(obs_before, obs_after, action, done, info)
    assert priced.tolist() == [-0.5, 1.0, 0.0, -1.0]


def test_launch_prices_every_own_launch():
    obs_before, obs_after, action, done, info = fake_step()
    assert make_reward("launch").compute(obs_before, obs_after, action, done, info).tolist() == [1.0, 0.0, 0.0, 2.0]
    priced = make_reward("outcome+-0.03*launch").compute(obs_before, obs_after, action, done, info)
    assert priced.tolist() == pytest.approx([-0.03, 1.0, 0.0, -1.06])


def test_wasted_counts_launches_only_beyond_the_no_escape_reach():
    _, obs_after, action, done, info = fake_step()
    real = BatchedSim(4, SimConfig(), seed=3).reset()[:, 0]  # real kinematics; ranges set below
    i_rng = LAYOUT.index("enemy.range")
    real[:, i_rng] = torch.tensor([0.1, 3.0, 0.1, 3.0])  # 5 km, 150 km
    info["launches"] = torch.tensor([1, 1, 0, 2])
    wasted = make_reward("wasted", layout=LAYOUT, sim_config=SimConfig())
    assert wasted.compute(real, obs_after, action, done, info).tolist() == [0.0, 1.0, 0.0, 2.0]
    # The reach is the configured missile's: at 25 km (beyond this missile's 16-17 km no-escape
    # reach here) a missile with three times the thrust (34-35 km) is not wasted.
    real[:, i_rng] = 0.5
    assert wasted.compute(real, obs_after, action, done, info).tolist() == [1.0, 1.0, 0.0, 2.0]
    strong = SimConfig(missile=dataclasses.replace(SimConfig().missile,
                                                   max_thrust_mps2=3 * SimConfig().missile.max_thrust_mps2))
    stronger = make_reward("wasted", layout=LAYOUT, sim_config=strong)
    assert stronger.compute(real, obs_after, action, done, info).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_closing_is_the_range_decrease_while_alive():
    obs_before, obs_after, action, done, info = fake_step()
    i_rng, i_alive = LAYOUT.index("enemy.range"), LAYOUT.index("own.alive")
    obs_before[:, i_rng] = torch.tensor([0.8, 0.8, 0.5, 0.5])
    obs_after[:, i_rng] = torch.tensor([0.6, 1.0, 0.5, 0.1])
    obs_after[:, i_alive] = torch.tensor([1.0, 1.0, 1.0, 0.0])  # the last one was shot down
    r = make_reward("closing", layout=LAYOUT).compute(obs_before, obs_after, action, done, info)
    assert torch.allclose(r, torch.tensor([0.2, -0.2, 0.0, 0.0]))


def test_hunt_is_the_change_of_minus_the_range_to_a_disarmed_living_enemy():
    obs_before, obs_after, action, done, info = fake_step(n=8)
    idx = {name: LAYOUT.index(name) for name in ("enemy.range", "own.alive", "enemy.alive", "own.missiles_left",
                                                 "enemy.missiles_left", "incoming[0].present")}
    for obs in (obs_before, obs_after):
        obs[:, idx["own.alive"]] = 1.0
        obs[:, idx["enemy.alive"]] = 1.0
        obs[:, idx["own.missiles_left"]] = 0.5
        obs[:, idx["enemy.missiles_left"]] = 0.0
        obs[:, idx["incoming[0].present"]] = 0.0
    obs_before[:, idx["enemy.range"]] = 0.8
    obs_after[:, idx["enemy.range"]] = torch.tensor([0.6, 1.0, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6])
    obs_before[2, idx["enemy.missiles_left"]] = 1 / 6      # the enemy fired its last missile in the step
    obs_before[3, idx["incoming[0].present"]] = 1.0        # ... its last one in flight was lost in the step
    obs_after[4, idx["incoming[0].present"]] = 1.0         # it is still armed: one in flight
    obs_before[4, idx["incoming[0].present"]] = 1.0
    obs_after[5, idx["enemy.alive"]] = 0.0                 # the enemy was shot down in the step
    obs_after[6, idx["own.alive"]] = 0.0                   # the fighter left the arena: no bonus
    obs_before[7, idx["own.missiles_left"]] = 0.0          # the fighter's own missiles do not matter
    r = make_reward("hunt", layout=LAYOUT).compute(obs_before, obs_after, action, done, info)
    assert torch.allclose(r, torch.tensor([0.2, -0.2, -0.6, -0.6, 0.0, 0.8, 0.2, 0.2]))
    summed = make_reward("shaped+0.5*hunt", layout=LAYOUT).compute(obs_before, obs_after, action, done, info)
    shaped = make_reward("shaped", layout=LAYOUT).compute(obs_before, obs_after, action, done, info)
    assert torch.allclose(summed - shaped, 0.5 * r)


def _potential_over_a_fight(name: str, seed: int, decisions: int, actions_for):
    """A real fight of 64 envs (every one starting with part of its missiles) scored with the
    potential term ``name`` from red's side until each env's first episode ends: the potential
    at the start, the sum of the step rewards, the potential at the end, and which envs are
    still in their first episode."""
    config = SimConfig(spawn_partial_ammo=1.0)
    sim = BatchedSim(64, config, seed=seed)
    obs = sim.reset()[:, 0].clone()
    term = make_reward(name, layout=ObsLayout.from_config(config), sim_config=config)
    start = term.potential(obs)
    total, last = torch.zeros(64), start.clone()
    alive = torch.ones(64, dtype=torch.bool)
    for i in range(decisions):
        actions = actions_for(i)
        result = sim.step(actions)
        after = result.final_obs[:, 0]
        step = term.compute(obs, after, actions[:, 0], result.done, step_info(result, 0))
        total += torch.where(alive, step, torch.zeros(64))
        last = torch.where(alive, term.potential(after), last)
        alive &= ~result.done
        obs = result.obs[:, 0].clone()
    return start, total, last, alive


def test_hunt_over_a_whole_fight_is_minus_the_final_range_to_a_disarmed_enemy_left_alive():
    # Red flies straight at a blue that starts disarmed or not and never fires; the step
    # rewards add up to the potential at the end, whatever happened on the way.
    def straight_on(_):
        actions = torch.zeros(64, 2, 3, dtype=torch.int64)
        actions[:, :, 1] = 2
        return actions

    start, total, last, alive = _potential_over_a_fight("hunt", 4, 60, straight_on)
    assert bool((start < 0).any()) and bool((start == 0).any()) and bool((~alive).any())
    assert torch.allclose(total, last - start, atol=1e-5)


def test_disarmed_charges_the_moment_the_last_own_missile_is_gone_against_a_living_enemy():
    obs_before, obs_after, action, done, info = fake_step(n=6)
    idx = {name: LAYOUT.index(name) for name in ("own.missiles_left", "enemy.alive")}
    flying = [LAYOUT.index(f"own_missile[{i}].present") for i in range(LAYOUT.own_missiles)]
    for obs in (obs_before, obs_after):
        obs[:, idx["enemy.alive"]] = 1.0
        obs[:, idx["own.missiles_left"]] = 0.0
        obs[:, flying] = 0.0
    obs_before[0, flying[0]] = 1.0                  # the last own missile in flight was lost: -1
    obs_before[1, idx["own.missiles_left"]] = 1 / 6  # fired the last one, still in flight: 0
    obs_after[1, flying[0]] = 1.0
    obs_before[2, flying[3]] = 1.0                   # the last one hit: the enemy is dead, 0
    obs_after[2, idx["enemy.alive"]] = 0.0
    obs_after[3, idx["enemy.alive"]] = 0.0           # disarmed before, then the enemy died: +1
    obs_before[5, idx["own.missiles_left"]] = 2 / 6  # armed before and after: 0
    obs_after[5, idx["own.missiles_left"]] = 1 / 6
    # (row 4: disarmed before and after against a living enemy: 0)
    r = make_reward("disarmed", layout=LAYOUT).compute(obs_before, obs_after, action, done, info)
    assert torch.equal(r, torch.tensor([-1.0, 0.0, 0.0, 1.0, 0.0, 0.0]))


def test_disarmed_over_a_whole_fight_is_its_potential_at_the_end():
    gen = torch.Generator().manual_seed(0)

    def random_fire(_):
        actions = torch.randint(0, 3, (64, 2, 3), generator=gen)
        actions[:, :, 2] = (torch.rand(64, 2, generator=gen) < 0.3).long()
        return actions

    start, total, last, _ = _potential_over_a_fight("disarmed", 5, 80, random_fire)
    assert bool((last < 0).any()) and bool((last == 0).any())
    assert torch.equal(total, last - start)


def test_edge_prices_the_outer_band_of_the_arena():
    obs_before, obs_after, action, done, info = fake_step(n=5)
    x, y = LAYOUT.index("own.x"), LAYOUT.index("own.y")
    for obs in (obs_before, obs_after):
        obs[:, [x, y]] = 0.0
    obs_after[0, x] = 0.5      # inside the inner 80 %: nothing
    obs_after[1, y] = -0.9     # halfway into the band: −0.5
    obs_after[2, x] = 1.3      # past the edge (out): −1, no more
    obs_before[3, x], obs_after[3, x] = 0.95, 0.85  # back towards the centre: +0.5
    obs_before[4, y], obs_after[4, x] = 0.9, 0.9    # along the band, y to x: 0
    r = make_reward("edge", layout=LAYOUT).compute(obs_before, obs_after, action, done, info)
    torch.testing.assert_close(r, torch.tensor([0.0, -0.5, -1.0, 0.5, 0.0]))


def test_edge_over_a_whole_fight_is_its_potential_at_the_end():
    # Both fly straight at full throttle for up to 280 s: past each other, out of the arena in most.
    def straight_on(_):
        actions = torch.zeros(64, 2, 3, dtype=torch.int64)
        actions[:, :, 0], actions[:, :, 1] = 1, 2
        return actions

    start, total, last, _ = _potential_over_a_fight("edge", 6, 560, straight_on)
    assert bool((start == 0).all()) and bool((last == -1).any()) and bool((last == 0).any())
    torch.testing.assert_close(total, last - start)


def test_press_finds_the_enemy_where_the_sim_has_it_and_prices_its_band():
    config = SimConfig()
    sim = BatchedSim(16, config, seed=3)
    obs = sim.reset()
    gen = torch.Generator().manual_seed(1)
    for _ in range(40):  # random flying, so headings and bearings are all over the circle
        obs = sim.step(torch.randint(0, 2, (16, 2, 3), generator=gen)).obs
    press = make_reward("press", layout=sim.layout, sim_config=config)
    half = config.arena_half_width_m
    for side in (0, 1):
        ex, ey = press.enemy_position(obs[:, side])
        st = sim.state
        torch.testing.assert_close(ex, st.f_px[1 - side].float() / half, atol=1e-4, rtol=0)
        torch.testing.assert_close(ey, st.f_py[1 - side].float() / half, atol=1e-4, rtol=0)
    # The band: own fighter at the centre heading +x, the enemy dead ahead at 0.5, 0.9 and 1.2
    # half widths (1.2: past the edge, alive for this one step), and one dead at 0.9.
    x, y = LAYOUT.index("own.x"), LAYOUT.index("own.y")
    obs_before, obs_after, action, done, info = fake_step(n=4)
    for o in (obs_before, obs_after):
        o[:, [x, y]] = 0.0
        o[:, LAYOUT.index("own.heading_cos")], o[:, LAYOUT.index("own.heading_sin")] = 1.0, 0.0
        o[:, LAYOUT.index("enemy.bearing_cos")], o[:, LAYOUT.index("enemy.bearing_sin")] = 1.0, 0.0
        o[:, LAYOUT.index("enemy.alive")] = 1.0
        o[:, LAYOUT.index("enemy.range")] = torch.tensor([0.5, 0.9, 1.2, 0.9]) * half / 50_000.0
    obs_after[3, LAYOUT.index("enemy.alive")] = 0.0
    term = make_reward("press", layout=LAYOUT)
    torch.testing.assert_close(term.potential(obs_before), torch.tensor([0.0, 0.5, 1.0, 0.5]))
    torch.testing.assert_close(term.compute(obs_before, obs_after, action, done, info),
                               torch.tensor([0.0, 0.0, 0.0, -0.5]))  # the dead enemy's band taken back


def test_press_over_a_whole_fight_is_its_potential_at_the_end():
    def straight_on(_):
        actions = torch.zeros(64, 2, 3, dtype=torch.int64)
        actions[:, :, 0], actions[:, :, 1] = 1, 2
        return actions

    # Straight past each other: in some fights red leaves the arena with blue still alive in
    # the band, so the total is not 0 everywhere.
    start, total, last, _ = _potential_over_a_fight("press", 6, 560, straight_on)
    assert bool((start == 0).all()) and bool((last > 0).any()) and bool((last == 0).any())
    torch.testing.assert_close(total, last - start)


def test_shaped_is_outcome_plus_its_documented_dense_terms():
    obs_before, obs_after, action, done, info = fake_step()
    cfg = ShapedConfig()
    r = ShapedReward(layout=LAYOUT).compute(obs_before, obs_after, action, done, info)
    i_rng, i_bc, i_alive = (LAYOUT.index(k) for k in ("enemy.range", "enemy.bearing_cos", "own.alive"))
    expected = (
        info["reward"]
        + cfg.aim_weight * obs_after[:, i_bc] * obs_after[:, i_alive]
        + cfg.closing_weight * (obs_before[:, i_rng] - obs_after[:, i_rng])
        - cfg.launch_cost * info["launches"]
    )
    assert torch.allclose(r, expected)
    no_dense = ShapedReward(config=ShapedConfig(aim_weight=0, closing_weight=0, launch_cost=0))
    assert torch.equal(no_dense.compute(obs_before, obs_after, action, done, info), info["reward"])


def test_weighted_sum_and_specs():
    args = fake_step()
    total = WeightedSum([(2.0, OutcomeReward()), (0.5, make_reward("tests.test_rewards:Fuel"))]).compute(*args)
    assert total.tolist() == [-0.5, 2.0, 0.0, -3.0]
    parsed = make_reward("2*outcome + 0.5*tests.test_rewards:Fuel")
    assert isinstance(parsed, WeightedSum) and torch.equal(parsed.compute(*args), total)
    assert isinstance(make_reward("shaped"), ShapedReward)
    assert isinstance(make_reward("zero"), ZeroReward)
    assert isinstance(make_reward(" outcome "), OutcomeReward)


def test_bad_specs_and_inputs_are_refused():
    with pytest.raises(ValueError, match="unknown reward 'fancy'"):
        make_reward("fancy")
    with pytest.raises(ValueError, match="weight 'x' is not a number"):
        make_reward("x*outcome")
    # float() reads these too: every reward would be NaN or infinite, so the spec is refused.
    for spec, weight in (("nan*shaped", "nan"), ("outcome+inf*shaped", "inf"), ("-inf*outcome", "-inf"),
                         ("1e999*zero", "1e999"), ("NaN * outcome", "NaN")):
        with pytest.raises(ValueError, match=f"weight '{weight}' is not finite"):
            make_reward(spec)
    with pytest.raises(ValueError, match="has an empty term"):
        make_reward("outcome+")
    with pytest.raises(ValueError, match="cannot import module"):
        make_reward("no_such_pkg_abc:R")
    with pytest.raises(ValueError, match=r"not a rewards\.BaseReward"):
        make_reward("tests.test_rewards:fake_step")
    with pytest.raises(ValueError, match="at least one"):
        WeightedSum([])
    obs_before, obs_after, action, done, info = fake_step()
    with pytest.raises(ValueError, match=r"obs_after must have shape \(4, "):
        OutcomeReward().compute(obs_before, obs_after[:3], action, done, info)
    with pytest.raises(ValueError, match="done must be a bool tensor"):
        OutcomeReward().compute(obs_before, obs_after, action, done.float(), info)
    del info["hits"]
    with pytest.raises(ValueError, match="info is missing key"):
        OutcomeReward().compute(obs_before, obs_after, action, done, info)
    with pytest.raises(ValueError, match=r"ShapedConfig\.aim_weight must be a number"):
        ShapedConfig(aim_weight="big")
    with pytest.raises(ValueError, match=r"ShapedConfig\.launch_cost must be finite, got inf"):
        ShapedConfig(launch_cost=float("inf"))


@pytest.mark.parametrize("learner, opponent", [("random", "pursuit"), ("shooter", "crank"), ("pursuit", "straight")])
def test_shaped_dense_terms_stay_far_below_the_outcome_over_whole_episodes(learner, opponent, one_thread):
    n = 64
    sim = BatchedSim(n, SimConfig(), seed=5)
    red, blue = (make_agent(s, n, sim.layout, seed=i) for i, s in enumerate((learner, opponent)))
    shaped, outcome = ShapedReward(layout=sim.layout), make_reward("outcome")
    dense_total = torch.zeros(n)
    outcome_total = torch.zeros(n)
    finished = torch.zeros(n, dtype=torch.bool)
    obs = sim.reset().clone()
    for _ in range(sim.config.max_decisions):
        action = red.act(obs[:, 0])
        out = sim.step(torch.stack([action, blue.act(obs[:, 1])], dim=1))
        info = step_info(out, 0)
        args = (obs[:, 0], out.final_obs[:, 0], action, out.done, info)
        live = ~finished
        dense_total += torch.where(live, shaped.dense(*args), 0.0)
        outcome_total += torch.where(live, outcome.compute(*args), 0.0)
        finished |= out.done
        obs = out.obs.clone()
        if bool(finished.all()):
            break
    assert bool(finished.all())
    # The documented bound is 0.12 + 0.085 + 0.06; real episodes stay well inside it.
    print(f"max |dense| over an episode: {float(dense_total.abs().max()):.3f}")
    assert float(dense_total.abs().max()) < 0.27
    decided = outcome_total != 0
    if bool(decided.any()):
        assert float(dense_total[decided].abs().max()) < 0.3 * float(outcome_total[decided].abs().min())


def test_ammo_moves_when_a_missile_is_gone_without_a_kill_not_when_it_is_launched():
    obs_before, obs_after, action, done, info = fake_step(n=6)
    idx = {name: LAYOUT.index(name) for name in ("own.missiles_left", "enemy.missiles_left", "own.alive",
                                                 "enemy.alive")}
    own_flying = [LAYOUT.index(f"own_missile[{i}].present") for i in range(LAYOUT.own_missiles)]
    incoming = [LAYOUT.index(f"incoming[{i}].present") for i in range(LAYOUT.incoming)]
    for obs in (obs_before, obs_after):
        obs[:, [idx["own.alive"], idx["enemy.alive"]]] = 1.0
        obs[:, [idx["own.missiles_left"], idx["enemy.missiles_left"]]] = 3 / 6
        obs[:, own_flying + incoming] = 0.0
    obs_after[0, idx["own.missiles_left"]] = 2 / 6   # own launch, now in flight: 0
    obs_after[0, own_flying[0]] = 1.0
    obs_before[1, own_flying[1]] = 1.0               # own missile gone, the enemy alive: -1/6
    obs_before[2, incoming[0]] = 1.0                 # the enemy's missile gone, defended: +1/6
    obs_before[2, incoming[2]] = 1.0
    obs_after[2, incoming[0]] = 1.0
    obs_before[3, idx["enemy.missiles_left"]] = 4 / 6  # ahead by one, then the kill: back to 0
    obs_after[3, idx["enemy.alive"]] = 0.0
    obs_after[4, idx["own.alive"]] = 0.0             # killed even: 0
    obs_after[5, idx["enemy.missiles_left"]] = 2 / 6  # an enemy launch in flight: 0
    obs_after[5, incoming[1]] = 1.0
    r = make_reward("ammo", layout=LAYOUT).compute(obs_before, obs_after, action, done, info)
    assert torch.allclose(r, torch.tensor([0.0, -1 / 6, 1 / 6, 1 / 6, 0.0, 0.0]))


def test_ammo_over_a_whole_fight_is_its_potential_at_the_end_and_zero_for_a_decided_fight():
    gen = torch.Generator().manual_seed(1)

    def random_fire(_):
        actions = torch.randint(0, 3, (64, 2, 3), generator=gen)
        actions[:, :, 2] = (torch.rand(64, 2, generator=gen) < 0.2).long()
        return actions

    start, total, last, alive = _potential_over_a_fight("ammo", 6, 120, random_fire)
    assert bool((start != 0).any()) and bool((~alive).any())  # uneven starts; some fights decided
    assert torch.allclose(total, last - start, atol=1e-5)
    assert bool((last != 0).any())  # fights still running, or drawn, keep their balance


def test_ammo_is_unchanged_by_real_launches():
    # Both sides fire on the first decision of a real fight: every missile leaves the rack and
    # enters a slot of the observation, so neither side's balance moves.
    config = SimConfig()
    sim = BatchedSim(32, config, seed=3)
    obs = sim.reset()
    actions = torch.zeros(32, 2, 3, dtype=torch.int64)
    actions[:, :, 1], actions[:, :, 2] = 1, 1
    result = sim.step(actions)
    term = make_reward("ammo", layout=ObsLayout.from_config(config), sim_config=config)
    for side in (0, 1):
        info = step_info(result, side)
        assert bool((info["launches"] > 0).all())
        r = term.compute(obs[:, side], result.final_obs[:, side], actions[:, side], result.done, info)
        assert torch.equal(r, torch.zeros(32))
