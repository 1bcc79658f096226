"""``Midrange-v0`` built from specs (pipeline/envs/midrange.py): every agent spec the launcher
takes, the reward specs, sim options, Gymnasium's own checks, seeding, and bad input named."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import gymnasium
import numpy as np
import pytest
import torch
from ckpt_damage import DAMAGE
from gymnasium.utils.env_checker import check_env

import sim  # noqa: F401  (registers Midrange-v0)
from agents.base import RandomAgent
from agents.policy import PolicyAgent
from agents.scripted import CrankAgent, StraightAgent
from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import save_checkpoint
from pipeline.envs.midrange import DEFAULT_OPPONENT, RedReward, make_env, make_vector_env
from rewards.presets import ShapedReward
from sim.config import SimConfig
from sim.layout import ObsLayout


def make_straight(num_envs: int, layout: ObsLayout, action_mode: str) -> StraightAgent:
    """An import-path opponent (``test_pipeline_midrange_gym:make_straight``)."""
    return StraightAgent(num_envs, layout, action_mode=action_mode)


def _save(directory: Path) -> Path:
    layout = ObsLayout.from_config(SimConfig())
    learner = PPOLearner(PPOConfig(hidden_sizes=(8,)), layout.size, ActionSpec.for_sim(SimConfig()),
                         obs_layout=layout.metadata())
    return save_checkpoint(directory, learner)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return _save(tmp_path_factory.mktemp("ckpt") / "checkpoints")


def test_default_opponent_is_the_champion_and_beats_a_random_policy() -> None:
    env = make_vector_env(16)
    assert DEFAULT_OPPONENT == "ace2" and isinstance(env.opponent, PolicyAgent)
    # The packaged policy, checked against the env's observation layout on load.
    assert env.opponent.policy.obs_layout == ObsLayout.from_config(SimConfig()).metadata()
    env.reset(seed=0)
    env.action_space.seed(0)
    winners: list[int] = []
    while len(winners) < 16:
        _obs, _rew, term, trunc, info = env.step(env.action_space.sample())
        winners += [int(w) for w in info["winner"][term | trunc]]
    # Against pursuit, which never fires, a random policy won every episode.
    assert winners.count(1) > winners.count(0), winners


@pytest.mark.parametrize("opponent", ["crank", "random", "shooter", "ace", "checkpoint", "import path"])
def test_every_kind_of_opponent_spec_passes_gymnasiums_checks(opponent: str, checkpoint: Path) -> None:
    spec = {"checkpoint": str(checkpoint),
            "import path": "test_pipeline_midrange_gym:make_straight"}.get(opponent, opponent)
    env = gymnasium.make("Midrange-v0", opponent=spec, reward="outcome+0.1*shaped")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    built = type(env.unwrapped.opponent).__name__  # type: ignore[attr-defined]
    expected = {"crank": "CrankAgent", "random": "RandomAgent", "shooter": "ShooterAgent",
                "ace": "PolicyAgent", "checkpoint": "PolicyAgent", "import path": "StraightAgent"}[opponent]
    assert built == expected


def test_sim_options_reach_the_simulator() -> None:
    env = gymnasium.make("Midrange-v0", scenario="head_on", time_scale=2.0, action_mode="continuous")
    cfg = env.unwrapped.config  # type: ignore[attr-defined]
    assert (cfg.scenario, cfg.time_scale, cfg.action_mode) == ("head_on", 2.0, "continuous")
    assert isinstance(env.action_space, gymnasium.spaces.Box)
    obs, _ = env.reset(seed=0)
    layout = env.unwrapped.layout  # type: ignore[attr-defined]
    # Head-on: the enemy is dead ahead.
    assert obs[layout.index("enemy.bearing_cos")] == pytest.approx(1.0, abs=1e-5)
    env.step(env.action_space.sample())


def test_the_reward_spec_scores_red() -> None:
    outcome = make_env(opponent="straight", reward="outcome")
    shaped = make_env(opponent="straight", reward="shaped")
    assert isinstance(shaped.reward, RedReward) and isinstance(shaped.reward.reward, ShapedReward)
    rewards: dict[str, list[float]] = {"outcome": [], "shaped": []}
    for name, env in (("outcome", outcome), ("shaped", shaped)):
        env.reset(seed=5)
        for _ in range(30):
            rewards[name].append(env.step(np.array([1, 2, 0]))[1])
    assert set(rewards["outcome"]) == {0.0}  # nothing ends in 30 steps from a random start
    assert any(r != 0.0 for r in rewards["shaped"])


def test_same_seed_same_trajectory_against_a_random_opponent() -> None:
    def rollout(seed: int) -> list[float]:
        env = gymnasium.make("Midrange-v0", opponent="random")
        env.reset(seed=seed)
        env.action_space.seed(0)
        return [float(env.step(env.action_space.sample())[0].sum()) for _ in range(40)]

    first = rollout(7)
    assert rollout(7) == first
    assert rollout(8) != first


def test_vector_env_takes_the_same_options() -> None:
    env = gymnasium.make_vec("Midrange-v0", num_envs=3, vectorization_mode="vector_entry_point",
                             opponent="random", reward="shaped", scenario="head_on", time_scale=2.0)
    inner = env.unwrapped
    assert isinstance(inner.opponent, RandomAgent) and inner.opponent.num_envs == 3  # type: ignore[attr-defined]
    assert inner.config.time_scale == 2.0  # type: ignore[attr-defined]

    def rollout() -> np.ndarray:
        env.reset(seed=3)
        env.action_space.seed(0)
        return np.stack([env.step(env.action_space.sample())[0] for _ in range(20)])

    first = rollout()
    np.testing.assert_array_equal(rollout(), first)


def test_agent_objects_are_taken_as_they_are() -> None:
    layout = ObsLayout.from_config(SimConfig())
    crank = CrankAgent(4, layout)
    env = make_vector_env(4, opponent=crank, reward=ShapedReward(layout=layout))
    assert env.opponent is crank
    env.reset(seed=0)
    env.step(np.ones((4, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="opponent CrankAgent flies 4 duels, the env has 2"):
        make_vector_env(2, opponent=crank)
    with pytest.raises(ValueError, match="acts in action_mode 'discrete', the env's is 'continuous'"):
        make_vector_env(4, opponent=crank, action_mode="continuous")
    with pytest.raises(ValueError, match=r"opponent must be a scripted name .* got int"):
        make_env(opponent=3)  # type: ignore[arg-type]


def test_an_opponent_that_returns_the_wrong_shape_is_named() -> None:
    class OneRow(RandomAgent):
        def act(self, obs: torch.Tensor) -> torch.Tensor:
            return super().act(obs)[:1]

    env = make_vector_env(3, opponent=OneRow(3))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"opponent OneRow returned actions of shape \(1, 3\), expected \(3, 3\)"):
        env.step(np.ones((3, 3), dtype=np.int64))


@pytest.mark.parametrize(("spec", "message"), [
    ("kamikaze", r"Midrange-v0 opponent 'kamikaze': unknown agent 'kamikaze': expected one of straight, "
                 r"pursuit, shooter, crank, random, .*"),
    ("missing.pt", r"Midrange-v0 opponent 'missing\.pt': no checkpoint at missing\.pt \(no such file or directory\)"),
    ("nowhere/run", r"Midrange-v0 opponent 'nowhere/run': no checkpoint at nowhere/run .*"),
    ("tests.plugins_faulty:Nobody", r"Midrange-v0 opponent 'tests\.plugins_faulty:Nobody': module "
                                    r"'tests\.plugins_faulty' has no attribute 'Nobody'"),
])
def test_a_bad_opponent_spec_is_one_line_naming_it(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        gymnasium.make("Midrange-v0", opponent=spec)
    assert "\n" not in str(err.value)
    assert re.fullmatch(message, str(err.value)), str(err.value)
    with pytest.raises(ValueError, match=re.escape(f"Midrange-v0 opponent {spec!r}")):
        gymnasium.make_vec("Midrange-v0", num_envs=2, vectorization_mode="vector_entry_point", opponent=spec)


@pytest.mark.parametrize("kind", ["truncated", "random bytes", "foreign torch dict", "folder without latest.pt"])
def test_a_checkpoint_that_fails_to_load_is_named(kind: str, checkpoint: Path, tmp_path: Path) -> None:
    damage, message = DAMAGE[kind]
    bad = str(damage(checkpoint, tmp_path))
    with pytest.raises(ValueError) as err:
        gymnasium.make("Midrange-v0", opponent=bad)
    prefix = f"Midrange-v0 opponent {bad!r}: "
    assert str(err.value).startswith(prefix)
    assert re.fullmatch(message, str(err.value)[len(prefix):]), str(err.value)


def test_a_bad_reward_spec_is_named() -> None:
    with pytest.raises(ValueError, match="Midrange-v0 reward 'bonus': unknown reward 'bonus'"):
        gymnasium.make("Midrange-v0", reward="bonus")
    with pytest.raises(ValueError, match="reward term 'x\\*shaped': weight 'x' is not a number"):
        gymnasium.make("Midrange-v0", reward="outcome+x*shaped")
