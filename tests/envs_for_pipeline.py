"""Gymnasium env factories the pipeline must refuse, named by ``--env package.module:factory``."""

from __future__ import annotations

import gymnasium as gym
from gymnasium import spaces


class _Env(gym.Env):  # type: ignore[type-arg]
    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space) -> None:  # type: ignore[type-arg]
        self.observation_space = observation_space
        self.action_space = action_space


def dict_obs() -> gym.Env:  # type: ignore[type-arg]
    return _Env(spaces.Dict({"a": spaces.Box(-1, 1, (2,))}), spaces.Discrete(2))


def text_actions() -> gym.Env:  # type: ignore[type-arg]
    return _Env(spaces.Box(-1, 1, (2,)), spaces.Text(5))


def raises() -> gym.Env:  # type: ignore[type-arg]
    raise RuntimeError("this env cannot be built")
