"""Kickstarting: a teacher's actions taught to the policy on its own samples, early in the run
(``ppo.teacher``, ``ppo.teacher_coef``, ``ppo.teacher_until``)."""

from __future__ import annotations

import pytest
import torch

from learner import ActionSpec, PPOConfig, PPOLearner
from pipeline.config import ConfigError, resolve
from pipeline.run.sim_actors import make_teacher
from sim import ObsLayout
from sim.layout import CLOSING_SCALE_MPS, MISSILE_SPEED_SCALE_MPS, RANGE_SCALE_M
from tests.test_learner_ppo import random_batch


def teacher_rule(obs: torch.Tensor) -> torch.Tensor:
    """A fixed rule of the observation: rudder from the sign of component 0, throttle from
    component 1, fire when component 2 is above 1.5."""
    rudder = torch.where(obs[:, 0] > 1.0, 2, 0)
    throttle = torch.where(obs[:, 1] > 1.0, 2, 1)
    fire = (obs[:, 2] > 1.5).long()
    return torch.stack([rudder, throttle, fire], dim=-1)


def learner_with(rule=teacher_rule, **overrides) -> PPOLearner:
    cfg = PPOConfig(hidden_sizes=(32, 32), num_minibatches=4, update_epochs=2, total_updates=40,
                    learning_rate=3e-3, teacher="rule", teacher_coef=1.0, teacher_until=0.5).replace(**overrides)
    return PPOLearner(cfg, 12, ActionSpec("multi_discrete", nvec=(3, 3, 2)), teacher=rule)


def agreement(learner: PPOLearner, seed: int = 99) -> float:
    """How often the policy's most likely action is the teacher's, all three parts, on fresh
    observations."""
    obs = torch.randn(4096, 12, generator=torch.Generator().manual_seed(seed)) * 2.0 + 1.0
    actions, _, _ = learner.policy.act(obs, deterministic=True)
    return (actions == teacher_rule(obs)).all(-1).float().mean().item()


def test_the_teacher_is_learned_while_its_weight_lasts_and_then_no_longer_asked():
    calls = []

    def counted(obs: torch.Tensor) -> torch.Tensor:
        calls.append(obs.shape[0])
        return teacher_rule(obs)

    learner = learner_with(counted)
    before = agreement(learner)
    losses, coefs = [], []
    for i in range(40):
        # The rewards are noise: what the policy learns of the rule comes from the teacher.
        stats = learner.update(random_batch(learner, seed=i, version=learner.policy_version))
        losses.append(stats["loss_teacher"])
        coefs.append(stats["teacher_coef"])
    taught = agreement(learner)
    assert before < 0.15 < 0.6 < taught, (before, taught)
    assert losses[19] < 0.6 * losses[0], losses
    # The weight falls linearly from 1 to 0 at half of the 40 updates; after that the teacher
    # is not asked and its term is 0.
    assert coefs[0] == 1.0 and coefs[10] == pytest.approx(0.5) and coefs[19] == pytest.approx(0.05)
    assert coefs[20:] == [0.0] * 20 and losses[20:] == [0.0] * 20
    assert calls == [16 * 8] * 20


def test_a_teacher_floor_keeps_the_teacher_asked_at_that_weight_to_the_end():
    calls = []

    def counted(obs: torch.Tensor) -> torch.Tensor:
        calls.append(obs.shape[0])
        return teacher_rule(obs)

    learner = learner_with(counted, teacher_floor=0.2)
    coefs, losses = [], []
    for i in range(40):
        stats = learner.update(random_batch(learner, seed=i, version=learner.policy_version))
        coefs.append(stats["teacher_coef"])
        losses.append(stats["loss_teacher"])
    # From 1 down to the floor at half of the 40 updates, then the floor to the end.
    assert coefs[0] == 1.0 and coefs[10] == pytest.approx(0.6) and coefs[19] == pytest.approx(0.24)
    assert coefs[20:] == pytest.approx([0.2] * 20)
    assert all(loss > 0 for loss in losses[20:]) and calls == [16 * 8] * 40
    assert agreement(learner) > 0.6


def test_without_a_teacher_the_same_updates_do_not_learn_the_rule():
    learner = learner_with(None, teacher="", teacher_coef=0.0)
    for i in range(20):
        stats = learner.update(random_batch(learner, seed=i, version=learner.policy_version))
        assert stats["loss_teacher"] == 0.0 and stats["teacher_coef"] == 0.0
    assert agreement(learner) < 0.3


def test_per_sample_weights_leave_the_unasked_samples_out_of_the_teachers_term():
    def half(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return teacher_rule(obs), (obs[:, 3] > 1.0).float()

    def never(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return teacher_rule(obs), torch.zeros(obs.shape[0])

    whole, halved, silent = learner_with(), learner_with(half), learner_with(never)
    batch = random_batch(whole)
    asked = (batch.obs[..., 3] > 1.0).float().mean().item()
    first = {name: learner.update(batch) for name, learner in
             (("whole", whole), ("halved", halved), ("silent", silent))}
    # Each sample's term is the policy's NLL of the teacher's action (about the same for all at
    # the start): the halved term is about the share of samples asked of the whole one.
    assert first["whole"]["teacher_asked"] == 1.0 and first["halved"]["teacher_asked"] == pytest.approx(asked)
    assert 0.3 < asked < 0.7
    ratio = first["halved"]["loss_teacher"] / first["whole"]["loss_teacher"]
    assert ratio == pytest.approx(asked, abs=0.1), (ratio, asked)
    assert first["silent"]["loss_teacher"] == 0.0 and first["silent"]["teacher_asked"] == 0.0
    for i in range(1, 20):
        silent.update(random_batch(silent, seed=i, version=silent.policy_version))
    # A teacher asked nowhere teaches nothing, although its coefficient is 1 throughout.
    assert agreement(silent) < 0.3


@pytest.mark.parametrize("weights, named", [
    (lambda obs: torch.ones(obs.shape[0], 1), "shape"),
    (lambda obs: torch.ones(obs.shape[0], dtype=torch.int64), "float tensor"),
    (lambda obs: torch.full((obs.shape[0],), 1.5), r"\[0, 1\]"),
    (lambda obs: torch.full((obs.shape[0],), float("nan")), r"\[0, 1\]"),
])
def test_bad_teacher_weights_are_refused_before_any_weight_moves(weights, named):
    learner = learner_with(lambda obs: (teacher_rule(obs), weights(obs)))
    before = [p.detach().clone() for p in learner.policy.parameters()]
    with pytest.raises(ValueError, match=named):
        learner.update(random_batch(learner))
    assert all(torch.equal(p, q) for p, q in zip(before, learner.policy.parameters(), strict=True))


def fire_gap(learner: PPOLearner, seed: int = 99) -> float:
    """How much more likely the policy fires where the teacher's rule fires than where it does
    not, on fresh observations."""
    obs = torch.randn(4096, 12, generator=torch.Generator().manual_seed(seed)) * 2.0 + 1.0
    with torch.no_grad():
        p_fire = torch.softmax(learner.policy(obs)[0][:, -2:], dim=-1)[:, 1]
    rule_fires = teacher_rule(obs)[:, 2].bool()
    return (p_fire[rule_fires].mean() - p_fire[~rule_fires].mean()).item()


def flying_agreement(learner: PPOLearner, seed: int = 99) -> float:
    """:func:`agreement` on rudder and throttle alone."""
    obs = torch.randn(4096, 12, generator=torch.Generator().manual_seed(seed)) * 2.0 + 1.0
    actions, _, _ = learner.policy.act(obs, deterministic=True)
    return (actions[:, :2] == teacher_rule(obs)[:, :2]).all(-1).float().mean().item()


def test_teacher_weights_teach_the_flying_and_leave_the_fire_decision_to_the_returns():
    whole, flying = learner_with(), learner_with(teacher_weights=(1.0, 1.0, 0.0))
    assert abs(fire_gap(whole)) < 0.05 and abs(fire_gap(flying)) < 0.05
    for i in range(20):
        whole.update(random_batch(whole, seed=i, version=whole.policy_version))
        flying.update(random_batch(flying, seed=i, version=flying.policy_version))
    # Both learn the teacher's rudder and throttle; only the whole teacher teaches its trigger.
    assert flying_agreement(whole) > 0.6 and flying_agreement(flying) > 0.6
    assert fire_gap(whole) > 0.5, fire_gap(whole)
    assert abs(fire_gap(flying)) < 0.1, fire_gap(flying)


def test_the_teacher_weights_are_checked():
    with pytest.raises(ValueError, match="teacher would teach nothing"):
        PPOConfig(teacher="crank", teacher_coef=1.0, teacher_weights=(0.0, 0.0, 0.0))
    with pytest.raises(ValueError, match=r"teacher_weights \[1.0, 1.0, 0.0\] are given but no teacher"):
        PPOConfig(teacher_weights=(1.0, 1.0, 0.0))
    with pytest.raises(ValueError, match=r"teacher_weights\[2\] must be in \[0, 1000\]"):
        PPOConfig(teacher="crank", teacher_coef=1.0, teacher_weights=(1.0, 1.0, -1.0))
    with pytest.raises(ValueError, match="teacher_weights needs 3 values"):
        learner_with(teacher_weights=(1.0, 0.0))
    with pytest.raises(ConfigError, match=r"ppo\.teacher_weights has 2 values but the sim's discrete actions have 3"):
        sim_config(teacher="crank", teacher_weights=[1.0, 0.0])
    assert sim_config(teacher="crank", teacher_weights=[1, 1, 0]).ppo.teacher_weights == (1.0, 1.0, 0.0)


@pytest.mark.slow
def test_the_compiled_loss_learns_the_teacher_as_the_eager_one_does():
    eager, compiled = learner_with(), learner_with(compile=True)
    for i in range(3):
        a = eager.update(random_batch(eager, seed=i, version=i))
        b = compiled.update(random_batch(compiled, seed=i, version=i))
        assert b["loss_teacher"] == pytest.approx(a["loss_teacher"], rel=1e-4, abs=1e-5)
    for p, q in zip(eager.policy.parameters(), compiled.policy.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad, named", [
    (lambda obs: teacher_rule(obs)[:, :2], "shape"),
    (lambda obs: teacher_rule(obs).float(), "int64"),
    (lambda obs: teacher_rule(obs) + 2, "outside the action space"),
    (lambda obs: teacher_rule(obs)[:5], "shape"),
])
def test_a_teacher_with_bad_actions_is_refused_before_any_weight_moves(bad, named):
    learner = learner_with(bad)
    before = [p.detach().clone() for p in learner.policy.parameters()]
    with pytest.raises(ValueError, match=named):
        learner.update(random_batch(learner))
    assert all(torch.equal(p, q) for p, q in zip(before, learner.policy.parameters(), strict=True))
    assert learner.policy_version == 0


def test_the_teacher_fields_are_checked():
    with pytest.raises(ValueError, match="no teacher is named"):
        PPOConfig(teacher_coef=0.5)
    with pytest.raises(ValueError, match="teacher_coef is 0"):
        PPOConfig(teacher="crank")
    with pytest.raises(ValueError, match="teacher_until"):
        PPOConfig(teacher="crank", teacher_coef=1.0, teacher_until=0.0)
    with pytest.raises(ValueError, match="teacher_coef"):
        PPOConfig(teacher="crank", teacher_coef=float("nan"))
    with pytest.raises(ValueError, match=r"teacher_floor 2\.0 is above teacher_coef 1\.0"):
        PPOConfig(teacher="crank", teacher_coef=1.0, teacher_floor=2.0)
    with pytest.raises(ValueError, match="teacher_floor"):
        PPOConfig(teacher="crank", teacher_coef=1.0, teacher_floor=-0.1)
    with pytest.raises(ValueError, match=r"teacher_off_tti_s 30\.0 is given but no teacher is named"):
        PPOConfig(teacher_off_tti_s=30.0)
    with pytest.raises(ValueError, match="teacher_off_tti_s"):
        PPOConfig(teacher="crank", teacher_coef=1.0, teacher_off_tti_s=-1.0)
    with pytest.raises(ValueError, match=r"teacher_defence_weight 0\.25 is given but teacher_off_tti_s is 0"):
        PPOConfig(teacher="crank", teacher_coef=1.0, teacher_defence_weight=0.25)
    with pytest.raises(ValueError, match="teacher_defence_weight"):
        PPOConfig(teacher="crank", teacher_coef=1.0, teacher_off_tti_s=15.0, teacher_defence_weight=1.5)
    with pytest.raises(ValueError, match="no teacher was given"):
        PPOLearner(PPOConfig(teacher="crank", teacher_coef=1.0), 12, ActionSpec("multi_discrete", nvec=(3, 3, 2)))


def sim_config(**ppo):
    return resolve({"run": {"device": "cpu"}, "actors": {"envs_per_actor": 16, "rollout_len": 8},
                    "ppo": ppo})


def test_the_launcher_builds_a_scripted_teacher_that_acts_on_a_whole_batch():
    config = sim_config(teacher="tactic:pump", teacher_coef=1.0)
    layout = ObsLayout.from_config(config.sim)
    teacher = make_teacher(config, layout, torch.device("cpu"))
    obs = torch.zeros(config.samples_per_batch, layout.size)
    actions = teacher(obs)
    assert actions.shape == (config.samples_per_batch, 3) and actions.dtype == torch.int64


def test_the_launchers_teacher_takes_any_batch_size():
    # A run's last batch may hold fewer chunks than the full one (a budget of one chunk, say).
    config = sim_config(teacher="crank", teacher_coef=1.0)
    layout = ObsLayout.from_config(config.sim)
    teacher = make_teacher(config, layout, torch.device("cpu"))
    for n in (config.samples_per_batch, 32, 7, config.samples_per_batch, 1, 2, 3, 4, 5):
        assert teacher(torch.zeros(n, layout.size)).shape == (n, 3)


def inbound(layout: ObsLayout, n: int, range_m: float, closing_mps: float) -> torch.Tensor:
    """``n`` observations with one enemy missile inbound at ``range_m``, closing at ``closing_mps``."""
    obs = torch.zeros(n, layout.size)
    for field, value in (("present", 1.0), ("range", range_m / RANGE_SCALE_M),
                         ("speed", 900.0 / MISSILE_SPEED_SCALE_MPS), ("closing_speed", closing_mps / CLOSING_SCALE_MPS)):
        obs[:, layout.index(f"incoming[0].{field}")] = value
    return obs


def test_the_launchers_teacher_is_not_asked_where_a_missile_is_about_to_hit():
    config = sim_config(teacher="crank", teacher_coef=1.0, teacher_off_tti_s=30.0)
    layout = ObsLayout.from_config(config.sim)
    teacher = make_teacher(config, layout, torch.device("cpu"))
    # Nothing inbound; a missile 40 s away; one 20 s away; one flying away (not closing).
    obs = torch.cat([torch.zeros(2, layout.size), inbound(layout, 2, 32_000.0, 800.0),
                     inbound(layout, 2, 16_000.0, 800.0), inbound(layout, 2, 16_000.0, -300.0)])
    actions, weights = teacher(obs)
    assert actions.shape == (8, 3) and weights.tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    # A defence weight keeps that share of the teacher's pull there.
    kept = make_teacher(sim_config(teacher="crank", teacher_coef=1.0, teacher_off_tti_s=30.0,
                                   teacher_defence_weight=0.25), layout, torch.device("cpu"))
    assert kept(obs)[1].tolist() == [1.0, 1.0, 1.0, 1.0, 0.25, 0.25, 1.0, 1.0]
    # Without the setting the teacher returns its actions alone, asked everywhere.
    plain = make_teacher(sim_config(teacher="crank", teacher_coef=1.0), layout, torch.device("cpu"))
    assert torch.equal(plain(obs), actions)


def test_a_bad_teacher_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"ppo\.teacher: unknown tactic 'nonesuch'"):
        sim_config(teacher="tactic:nonesuch", teacher_coef=1.0)
    with pytest.raises(ConfigError, match=r"ppo\.teacher: no checkpoint at"):
        sim_config(teacher=str(tmp_path / "missing.pt"), teacher_coef=1.0)
    with pytest.raises(ConfigError, match=r"ppo\.teacher must not hold control characters"):
        sim_config(teacher="crank\n", teacher_coef=1.0)
    # A checkpoint that exists but is no policy is found out when the teacher is built.
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    config = sim_config(teacher=str(tmp_path / "junk.pt"), teacher_coef=1.0)
    with pytest.raises(ConfigError, match=r"ppo\.teacher: .*junk\.pt"):
        make_teacher(config, ObsLayout.from_config(config.sim), torch.device("cpu"))
    with pytest.raises(ConfigError, match=r"ppo\.teacher needs the air-combat sim"):
        resolve({"actors": {"env": "gym:CartPole-v1"}, "ppo": {"teacher": "crank", "teacher_coef": 1.0}})


def test_the_sims_runs_are_kickstarted_by_default_and_one_setting_turns_it_off():
    default = sim_config().ppo
    assert (default.teacher, default.teacher_coef, default.teacher_until) == ("tactic:pump", 1.0, 0.25)
    off = sim_config(teacher_coef=0).ppo
    assert (off.teacher, off.teacher_coef) == ("", 0.0)
    assert sim_config(teacher="crank").ppo.teacher_coef == 1.0
    assert sim_config(teacher_coef=0.5).ppo.teacher == "tactic:pump"
