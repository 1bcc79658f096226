"""The Gymnasium interfaces through Gymnasium's own checks and a few hundred random steps."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import sim  # noqa: F401  (registers Midrange-v0)
from sim.envs.gym import MidrangeEnv, MidrangeVectorEnv
from sim.envs.registration import REFERENCE_ENV_ID, register_envs

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("mode", ["discrete", "continuous"])
def test_check_env_passes_without_warnings(mode: str) -> None:
    env = gymnasium.make("Midrange-v0", action_mode=mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)


def test_a_fresh_process_makes_the_envs_named_with_their_module(tmp_path) -> None:
    # Outside the repository, in a process that never imported sim: Gymnasium 1.x loads no
    # plug-ins, so the id names its module and make() imports it (as a forkserver worker would).
    code = ("import sys, gymnasium\n"
            "assert 'sim' not in sys.modules\n"
            "env = gymnasium.make('sim:Midrange-v0', max_time_s=5.0)\n"
            "env.reset(seed=0); env.step(env.action_space.sample())\n"
            f"ref = gymnasium.make('sim:{REFERENCE_ENV_ID}')\n"
            "ref.reset(seed=0); ref.step(ref.action_space.sample())\n"
            "print('made', env.spec.id, ref.spec.id)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"made Midrange-v0 {REFERENCE_ENV_ID}" in out.stdout


def test_registering_again_changes_nothing() -> None:
    before = {k: gymnasium.spec(k) for k in ("Midrange-v0", REFERENCE_ENV_ID)}
    register_envs()
    register_envs()
    assert {k: gymnasium.spec(k) for k in before} == before


def test_registered_env_runs_random_steps_through_episodes() -> None:
    env = gymnasium.make("Midrange-v0", max_time_s=20.0)
    obs, _ = env.reset(seed=3)
    episodes = 0
    for _ in range(400):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        assert reward in (-1.0, 0.0, 1.0)
        if terminated or truncated:
            episodes += 1
            assert info["end_reason"] != "none"
            obs, _ = env.reset()
    assert episodes >= 5


def test_same_seed_same_trajectory() -> None:
    def rollout() -> list[float]:
        env = MidrangeEnv()
        env.reset(seed=42)
        env.action_space.seed(0)
        return [float(env.step(env.action_space.sample())[0].sum()) for _ in range(50)]

    assert rollout() == rollout()


def test_bad_action_is_rejected() -> None:
    env = MidrangeEnv()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.array([1, 1]))
    with pytest.raises(ValueError, match="integers"):
        env.step(np.array([1.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="out of range"):
        env.step(np.array([5, 1, 0]))


def test_vector_env_refuses_what_the_single_env_refuses() -> None:
    env = MidrangeVectorEnv(3)
    env.reset(seed=0)
    # Float indices were truncated by astype (1.9 flew as 1); the single env refuses them.
    with pytest.raises(ValueError, match="discrete actions must be integers, got dtype float64"):
        env.step(np.full((3, 3), 1.9))
    with pytest.raises(ValueError, match="integers, got dtype bool"):
        env.step(np.ones((3, 3), dtype=bool))
    with pytest.raises(ValueError, match=r"shape \(3, 3\)"):
        env.step(np.ones((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="out of range"):
        env.step(np.array([[5, 1, 0]] * 3))
    env.step(np.ones((3, 3), dtype=np.int32))  # any integer dtype is fine
    cont = MidrangeVectorEnv(3, action_mode="continuous")
    cont.reset(seed=0)
    cont.step(np.full((3, 3), 0.25))  # floats are the continuous interface


def test_vector_env_same_step_autoreset_and_random_steps() -> None:
    env = MidrangeVectorEnv(16, max_time_s=15.0)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    env.action_space.seed(1)
    finished = 0
    for _ in range(300):
        obs, _rewards, term, trunc, info = env.step(env.action_space.sample())
        assert obs.shape == (16, env.single_observation_space.shape[0])
        assert env.observation_space.contains(obs)
        done = term | trunc
        assert np.array_equal(info["_final_obs"], done)
        if done.any():
            finished += int(done.sum())
            time_left = env.layout.index("time.time_left")
            # The returned obs starts a new episode; the final obs is the ended one's.
            assert np.all(obs[done, time_left] == 1.0)
            assert np.all(info["final_obs"][done, time_left] < 1.0)
        assert not np.any(term & trunc)
    assert finished >= 16


def test_make_vec_uses_the_batched_vector_env() -> None:
    env = gymnasium.make_vec("Midrange-v0", num_envs=4, vectorization_mode="vector_entry_point")
    obs, _ = env.reset(seed=0)
    assert obs.shape[0] == 4
    env.step(env.action_space.sample())
