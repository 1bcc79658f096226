"""The reference simulator's single-agent Gymnasium env and its pursuit opponent."""

from __future__ import annotations

import functools
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from sim.config import SimConfig
from sim.layout import ObsLayout
from sim.reference.gym import ENV_ID, ReferenceEnv, make_reference_env, pursuit_action
from sim.reference.scalar import ReferenceSim
from sim.scenarios import initial_conditions


def test_check_env_passes_without_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gymnasium.make(ENV_ID)
        check_env(env.unwrapped)  # registered, so the render and close checks run too
        check_env(ReferenceEnv(max_time_s=30.0), skip_render_check=True)
        env.close()
    assert [str(w.message) for w in caught] == []


def test_random_steps_follow_the_api():
    env = ReferenceEnv(max_time_s=60.0)
    env.action_space.seed(1)
    obs, info = env.reset(seed=11)
    assert info["physics_steps"] == 0
    episodes = 0
    for _ in range(300):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert obs.dtype == np.float32 and env.observation_space.contains(obs)
        assert set(info) >= {"winner", "end_reason", "physics_steps"}
        assert 1 <= info["physics_steps"] <= env.config.physics_steps_per_decision
        if terminated or truncated:
            assert info["winner"] in (0, 1, 2) and info["end_reason"] > 0
            assert reward == {0: 1.0, 1: -1.0, 2: 0.0}[info["winner"]]
            episodes += 1
            env.reset()
        else:
            assert reward == 0.0 and info["winner"] == -1
    assert episodes >= 2  # 60 s episodes: at most 120 decisions each


def test_seeded_episodes_match_the_scenario_draws():
    cfg = SimConfig(max_time_s=30.0)
    env = ReferenceEnv(cfg)
    sim = ReferenceSim(cfg)
    first, _ = env.reset(seed=5)
    again, _ = env.reset(seed=5)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, np.float32(sim.reset(initial_conditions(cfg, 5, 0, 0))[0]))
    second, _ = env.reset()  # no seed: the next episode of the same seed
    np.testing.assert_array_equal(second, np.float32(sim.reset(initial_conditions(cfg, 5, 0, 1))[0]))
    assert not np.array_equal(first, second)


def test_pursuit_opponent_rule():
    layout = ObsLayout.from_config(SimConfig())
    bs, bc = layout.index("enemy.bearing_sin"), layout.index("enemy.bearing_cos")

    def act(sin, cos):
        obs = np.zeros(layout.size)
        obs[bs], obs[bc] = sin, cos
        return pursuit_action(obs, layout)

    assert act(0.5, 0.8) == (2, 2, 0)  # enemy to the left: turn left
    assert act(-0.5, 0.8) == (0, 2, 0)
    assert act(0.01, 1.0) == (1, 2, 0)  # dead ahead: straight
    assert act(0.0, -1.0) == (2, 2, 0)  # dead astern: turn left


def test_blue_pursues_in_the_env():
    # Blue starts heading away from red; the pursuit opponent must turn it around.
    env = ReferenceEnv(max_time_s=60.0)
    env.reset(seed=0)
    blue = env.sim.fighters[1]
    blue.vel = [-v for v in blue.vel]
    env._blue_obs = env.sim.observe()[1]  # the opponent acts on blue's latest observation
    for _ in range(40):
        env.step(np.array([1, 1, 0]))
    layout = env.layout
    assert env.sim.observe()[1][layout.index("enemy.bearing_cos")] > 0.9
    assert env.sim.fighters[1].missiles_left == env.config.missiles_per_fighter  # never fires


def test_bad_construction_and_actions_raise():
    with pytest.raises(ValueError, match="action_mode must be 'discrete'"):
        ReferenceEnv(action_mode="continuous")
    with pytest.raises(ValueError, match="config must be a SimConfig"):
        ReferenceEnv({"dt_s": 0.1})
    env = ReferenceEnv()
    env.reset()
    with pytest.raises(ValueError, match="action must be 3 integer indices"):
        env.step(np.array([1, 1]))
    with pytest.raises(ValueError, match=r"throttle index must be in 0\.\.2"):
        env.step(np.array([1, 5, 0]))


def test_async_vector_env_with_two_workers():
    factory = functools.partial(make_reference_env, max_time_s=20.0)
    envs = gymnasium.vector.AsyncVectorEnv([factory, factory])
    try:
        obs, _ = envs.reset(seed=3)
        assert obs.shape == (2, ObsLayout.from_config(SimConfig()).size)
        assert not np.array_equal(obs[0], obs[1])  # the two workers get different seeds
        for _ in range(50):
            obs, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
            assert reward.shape == terminated.shape == truncated.shape == (2,)
        assert obs.dtype == np.float32
    finally:
        envs.close()
