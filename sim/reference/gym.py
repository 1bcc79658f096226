"""A single-agent Gymnasium env around the scalar reference simulator.

Red is the agent; blue is flown by the built-in pursuit opponent (end of ``sim/RULES.md``).
This is the plain-Python, one-environment-per-process baseline: it is what a
``gymnasium.vector.AsyncVectorEnv`` of worker processes runs when the batched simulator is
compared against SubprocVecEnv-style stepping, so it must be picklable and constructible by a
top-level factory (:func:`make_reference_env`).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from sim.config import SimConfig
from sim.envs.registration import REFERENCE_ENV_ID
from sim.layout import OBS_CLIP, ObsLayout
from sim.reference.scalar import END_NONE, WINNER_NONE, ReferenceSim
from sim.scenarios import initial_conditions

ENV_ID = REFERENCE_ENV_ID
"""Gymnasium registry id of :class:`ReferenceEnv` (registered by ``import sim``)."""

PURSUIT_DEADBAND = 0.02
"""The pursuit opponent flies straight while |bearing sine| is within this."""


def pursuit_action(obs: list[float] | np.ndarray, layout: ObsLayout) -> tuple[int, int, int]:
    """The built-in pursuit opponent's discrete action (rudder, throttle, fire indices).

    Turns toward the enemy by the sign of the bearing sine, turns left when the enemy is
    straight behind, full throttle, never fires.
    """
    bs = float(obs[layout.index("enemy.bearing_sin")])
    bc = float(obs[layout.index("enemy.bearing_cos")])
    if bs > PURSUIT_DEADBAND:
        rudder = 1
    elif bs < -PURSUIT_DEADBAND:
        rudder = -1
    else:
        rudder = 1 if bc < 0 else 0
    return (rudder + 1, 2, 0)


class ReferenceEnv(gymnasium.Env):
    """Red against the pursuit opponent, stepped by :class:`sim.reference.scalar.ReferenceSim`.

    Actions are ``MultiDiscrete([3, 3, 2])`` (rudder, throttle, fire indices); observations are
    red's float32 observation vector; the reward is red's outcome reward. Episode ``k`` after a
    ``reset(seed=s)`` starts from ``initial_conditions(config, s, env_index=0, episode_index=k)``:
    a reset with a seed restarts ``k`` at 0, a reset without one moves on to the next episode.
    ``info`` holds ``winner``, ``end_reason``, ``physics_steps`` (physics steps taken in this env
    step), ``launches`` and ``hits`` (per side).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's class attribute)

    def __init__(self, config: SimConfig | None = None, **config_overrides: Any) -> None:
        """Build from a config (default ``SimConfig()``), with optional field overrides."""
        super().__init__()
        if config is None:
            config = SimConfig(**config_overrides)
        elif not isinstance(config, SimConfig):
            raise ValueError(f"config must be a SimConfig or None, got {type(config).__name__}")
        elif config_overrides:
            config = config.replace(**config_overrides)
        if config.action_mode != "discrete":
            raise ValueError(
                f"ReferenceEnv takes discrete actions; config.action_mode must be 'discrete', "
                f"got {config.action_mode!r}"
            )
        self.config = config
        self.layout = ObsLayout.from_config(config)
        self.sim = ReferenceSim(config)
        self.action_space = spaces.MultiDiscrete([3, 3, 2])
        self.observation_space = spaces.Box(
            -OBS_CLIP, OBS_CLIP, (self.layout.size,), dtype=np.float32
        )
        self._seed = 0
        self._episode = -1  # the first reset makes it 0
        self._blue_obs: list[float] = []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start the next episode (or episode 0 of ``seed`` when one is given)."""
        super().reset(seed=seed)
        if seed is not None:
            self._seed = int(seed)
            self._episode = 0
        else:
            self._episode += 1
        ic = initial_conditions(self.config, self._seed, 0, self._episode)
        red_obs, self._blue_obs = self.sim.reset(ic)
        info = {"winner": WINNER_NONE, "end_reason": END_NONE, "physics_steps": 0,
                "launches": [0, 0], "hits": [0, 0]}
        return np.asarray(red_obs, dtype=np.float32), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Advance one decision step with red's action; blue pursues."""
        arr = np.asarray(action)
        if arr.shape != (3,) or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"action must be 3 integer indices (rudder, throttle, fire), "
                f"got shape {arr.shape} dtype {arr.dtype}"
            )
        red = tuple(int(a) for a in arr)
        blue = pursuit_action(self._blue_obs, self.layout)
        before = self.sim.physics_steps
        out = self.sim.step([red, blue])
        self._blue_obs = out.obs[1]
        info = {
            "winner": out.winner,
            "end_reason": out.end_reason,
            "physics_steps": self.sim.physics_steps - before,
            "launches": list(out.launches),
            "hits": list(out.hits),
        }
        obs = np.asarray(out.obs[0], dtype=np.float32)
        return obs, float(out.reward[0]), out.terminated, out.truncated, info


def make_reference_env(config: SimConfig | None = None, **config_overrides: Any) -> ReferenceEnv:
    """Top-level (hence picklable) factory, e.g. for ``gymnasium.vector.AsyncVectorEnv``."""
    return ReferenceEnv(config, **config_overrides)

