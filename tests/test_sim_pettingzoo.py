"""The duel as a PettingZoo env (sim/envs/pettingzoo.py): PettingZoo's own API and seed tests, seeded
trajectories, both sides' views and rewards, refused actions, and the batched form."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test

from sim.envs.pettingzoo import AGENTS, DuelParallelEnv, batched_env, parallel_env


def _sample(env: DuelParallelEnv) -> dict[str, np.ndarray]:
    return {a: env.action_space(a).sample() for a in env.agents}


def _episode(env: DuelParallelEnv, seed: int) -> list[tuple]:
    """One whole episode from ``reset(seed=seed)`` with actions from spaces seeded by ``seed``."""
    obs, _ = env.reset(seed=seed)
    for i, a in enumerate(AGENTS):
        env.action_space(a).seed(seed + i)
    steps: list[tuple] = [tuple(obs[a].tobytes() for a in AGENTS)]
    while env.agents:
        obs, rew, term, trunc, _ = env.step(_sample(env))
        steps.append((*(obs[a].tobytes() for a in AGENTS), rew["red"], rew["blue"], term["red"], trunc["red"]))
    return steps


@pytest.mark.parametrize("mode", ["discrete", "continuous"])
def test_pettingzoo_parallel_api_test_passes_without_warnings(mode: str, capsys) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(parallel_env(action_mode=mode), num_cycles=1000)
    assert "Passed Parallel API test" in capsys.readouterr().out


def test_pettingzoo_seed_test_passes() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_seed_test(parallel_env)


def test_same_seed_same_trajectories() -> None:
    first = _episode(parallel_env(), seed=11)
    again = _episode(parallel_env(), seed=11)
    assert len(first) > 2 and first == again
    assert _episode(parallel_env(), seed=12) != first
    # Reseeding an env that has played on starts the seed's episodes again.
    env = parallel_env()
    _episode(env, seed=3)
    assert _episode(env, seed=11) == first


def test_each_side_sees_itself_and_gets_its_own_reward() -> None:
    env = parallel_env(scenario="head_on")
    obs, infos = env.reset(seed=0)
    assert set(obs) == set(infos) == set(AGENTS) and env.agents == ["red", "blue"]
    bearing_cos = env.layout.index("enemy.bearing_cos")
    for a in AGENTS:  # head-on: each sees the other dead ahead, from its own nose
        assert obs[a][bearing_cos] == pytest.approx(1.0, abs=1e-5)
        assert env.observation_space(a).contains(obs[a])
    assert env.state().shape == (2 * env.layout.size,)
    # Red fires at once and flies on; blue turns away and never fires.
    ended = None
    for _ in range(2000):
        obs, rew, term, trunc, info = env.step({"red": np.array([1, 2, 1]), "blue": np.array([0, 2, 0])})
        if term["red"] or trunc["red"]:
            ended = (rew, term, trunc, info)
            break
        assert rew == {"red": 0.0, "blue": 0.0}
    assert ended is not None, "no episode ended"
    rew, term, trunc, info = ended
    assert term == {"red": term["blue"], "blue": term["red"]} and trunc["red"] == trunc["blue"]
    assert info["red"]["winner"] == info["blue"]["winner"]
    expected = {"red": (1.0, -1.0), "blue": (-1.0, 1.0), "draw": (0.0, 0.0)}[info["red"]["winner"]]
    assert (rew["red"], rew["blue"]) == expected
    assert env.agents == []


def test_actions_for_done_missing_or_unknown_agents_are_refused_by_name() -> None:
    env = parallel_env()
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step({"red": np.array([1, 1, 0]), "blue": np.array([1, 1, 0])})
    env.reset(seed=0)
    with pytest.raises(ValueError, match="no action for agent 'blue': every live agent acts each step"):
        env.step({"red": np.array([1, 1, 0])})
    with pytest.raises(ValueError, match="unknown agent 'green': the agents are red, blue"):
        env.step({"red": np.array([1, 1, 0]), "blue": np.array([1, 1, 0]), "green": np.array([1, 1, 0])})
    with pytest.raises(ValueError, match="discrete action of agent 'blue' must be integers, got dtype float64"):
        env.step({"red": np.array([1, 1, 0]), "blue": np.array([1.0, 1.0, 0.0])})
    with pytest.raises(ValueError, match=r"action of agent 'red' must have shape \(3,\), got \(2,\)"):
        env.step({"red": np.array([1, 1]), "blue": np.array([1, 1, 0])})
    with pytest.raises(ValueError, match="unknown agent 'green'"):
        env.action_space("green")
    env.action_space("red").seed(0)
    env.action_space("blue").seed(1)
    while env.agents:
        _, _, _, _, info = env.step(_sample(env))
    reason = info["red"]["end_reason"]
    with pytest.raises(ValueError, match=rf"agent 'blue' is done: the episode ended \({reason}\); call reset\(\)"):
        env.step({"blue": np.array([1, 1, 0])})
    with pytest.raises(ValueError, match="both agents are done"):
        env.step({})
    env.reset()  # the next episode
    assert env.agents == ["red", "blue"]
    env.step({a: np.array([1, 1, 0]) for a in AGENTS})


def test_the_batched_form_plays_each_duel_as_the_parallel_env_does() -> None:
    n, seed = 4, 21
    batch = batched_env(n)
    single = parallel_env()
    bobs, _ = batch.reset(seed=seed)
    sobs, _ = single.reset(seed=seed)
    for a in AGENTS:  # duel 0 of the batch is the single env's duel
        assert bobs[a].shape == (n, single.layout.size)
        np.testing.assert_array_equal(bobs[a][0], sobs[a])
    rng = np.random.default_rng(0)
    for _ in range(400):
        actions = {a: rng.integers(0, [3, 3, 2], size=(n, 3)) for a in AGENTS}
        bobs, brew, bterm, btrunc, binfo = batch.step(actions)
        sobs, srew, sterm, strunc, _ = single.step({a: actions[a][0] for a in AGENTS})
        done = bterm["red"] | btrunc["red"]
        np.testing.assert_array_equal(binfo["red"]["_final_obs"], done)
        for a in AGENTS:
            first = binfo[a]["final_obs"][0] if done[0] else bobs[a][0]
            np.testing.assert_array_equal(first, sobs[a])
            assert brew[a][0] == srew[a]
        if done[0]:
            assert (sterm["red"], strunc["red"]) == (bterm["red"][0], btrunc["red"][0])
            break
    else:
        pytest.fail("duel 0 did not end in 400 steps")
    with pytest.raises(ValueError, match="no action for agent 'red'"):
        batch.step({"blue": actions["blue"]})
    with pytest.raises(ValueError, match=r"actions of agent 'blue' must have shape \(4, 3\), got \(3,\)"):
        batch.step({"red": actions["red"], "blue": actions["blue"][0]})
