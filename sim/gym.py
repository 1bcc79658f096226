"""Gymnasium interfaces: a single-agent ``Midrange-v0`` env and a vector env over the batched sim.

In both, the learner flies red (side 0) against the built-in pursuit opponent (sim/RULES.md),
observations are red's egocentric view (sim/layout.py) and the reward is red's outcome reward.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from sim.actions import DISCRETE_NVEC
from sim.autopilot import pursuit_actions
from sim.batched import BatchedSim, StepResult
from sim.config import SimConfig
from sim.kernels import END_REASONS
from sim.layout import OBS_CLIP, ObsLayout


def _config(config: SimConfig | None, overrides: dict[str, Any]) -> SimConfig:
    base = config if config is not None else SimConfig()
    return base.replace(**overrides) if overrides else base


def observation_space(layout: ObsLayout) -> spaces.Box:
    """One flyer's observation space."""
    return spaces.Box(-OBS_CLIP, OBS_CLIP, shape=(layout.size,), dtype=np.float32)


def action_space(config: SimConfig) -> spaces.Space:
    """One flyer's action space: MultiDiscrete([3, 3, 2]) or a Box (rudder, throttle, fire)."""
    if config.action_mode == "discrete":
        return spaces.MultiDiscrete(np.array(DISCRETE_NVEC, dtype=np.int64))
    low = np.array([-1.0, 0.0, 0.0], dtype=np.float32)
    return spaces.Box(low, np.ones(3, dtype=np.float32), dtype=np.float32)


def _full_actions(sim: BatchedSim, red: torch.Tensor, blue_obs: torch.Tensor) -> torch.Tensor:
    blue = pursuit_actions(blue_obs, sim.layout)
    if sim.config.action_mode == "continuous":
        levels = torch.tensor([-1.0, 0.0, 1.0], dtype=red.dtype, device=red.device)
        blue = torch.stack([levels[blue[:, 0]], blue[:, 1].to(red.dtype) * 0.5, blue[:, 2].to(red.dtype)], dim=-1)
    return torch.stack([red, blue], dim=1)


def _info(out: StepResult, i: int) -> dict[str, Any]:
    return {
        "winner": int(out.winner[i]),
        "end_reason": END_REASONS[int(out.end_reason[i])],
        "launches": int(out.launches[i, 0]),
        "hits": int(out.hits[i, 0]),
    }


class MidrangeEnv(gymnasium.Env):
    """One duel, red against pursuit. ``MidrangeEnv(config=None, **SimConfig overrides)``."""

    # Not a ClassVar: gymnasium declares metadata an instance attribute.
    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(self, config: SimConfig | None = None, render_mode: str | None = None, **overrides: Any) -> None:
        if render_mode is not None:
            raise ValueError(f"render_mode must be None (no renderer), got {render_mode!r}")
        self.config = _config(config, overrides)
        self._sim = BatchedSim(1, config=self.config)
        self.layout = self._sim.layout
        self.observation_space = observation_space(self.layout)
        self.action_space = action_space(self.config)
        self._blue_obs: torch.Tensor | None = None
        self._pending: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._sim.reseed(int(seed))
            self._pending = None
        if self._pending is not None:  # the sim already started the next episode at auto-reset
            obs, self._pending = self._pending, None
            return obs, {}
        full = self._sim.reset()
        self._blue_obs = full[:, 1].clone()
        return full[0, 0].numpy().astype(np.float32, copy=True), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._blue_obs is None:
            raise RuntimeError("call reset() before step()")
        arr = np.asarray(action)
        if arr.shape != (3,):
            raise ValueError(f"action must have shape (3,), got {arr.shape}")
        if self.config.action_mode == "discrete":
            if not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"discrete action must be integers, got dtype {arr.dtype}")
            red = torch.as_tensor(arr.astype(np.int64)).view(1, 3)
        else:
            red = torch.as_tensor(arr.astype(np.float64)).view(1, 3).to(self._sim.dtype)
        out = self._sim.step(_full_actions(self._sim, red, self._blue_obs))
        self._blue_obs = out.obs[:, 1].clone()
        obs = out.final_obs[0, 0].numpy().astype(np.float32, copy=True)
        terminated, truncated = bool(out.terminated[0]), bool(out.truncated[0])
        if terminated or truncated:
            self._pending = out.obs[0, 0].numpy().astype(np.float32, copy=True)
        return obs, float(out.reward[0, 0]), terminated, truncated, _info(out, 0)


class MidrangeVectorEnv(VectorEnv):
    """``num_envs`` duels on one torch device, red against pursuit, numpy in and out.

    Autoreset mode is ``SAME_STEP``: an ended environment's returned observation already starts
    its next episode; ``info["final_obs"]`` (a dense ``[N, D]`` array, valid where
    ``info["_final_obs"]``) holds the last observation of the ended one.
    """

    # Not a ClassVar: gymnasium declares metadata an instance attribute.
    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        num_envs: int,
        config: SimConfig | None = None,
        device: str = "cpu",
        compile: bool = False,
        render_mode: str | None = None,
        **overrides: Any,
    ) -> None:
        if render_mode is not None:
            raise ValueError(f"render_mode must be None (no renderer), got {render_mode!r}")
        self.config = _config(config, overrides)
        self.num_envs = num_envs
        self._sim = BatchedSim(num_envs, config=self.config, device=device, compile=compile)
        self.layout = self._sim.layout
        self.single_observation_space = observation_space(self.layout)
        self.single_action_space = action_space(self.config)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._blue_obs: torch.Tensor | None = None

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        if isinstance(seed, list):
            seed = seed[0]
        if seed is not None:
            self._sim.reseed(int(seed))
            self._np_random_seed = int(seed)
        mask = None
        if options is not None and "reset_mask" in options:
            mask = torch.as_tensor(np.asarray(options["reset_mask"], dtype=bool), device=self._sim.device)
        full = self._sim.reset(mask)
        self._blue_obs = full[:, 1].clone()
        return full[:, 0].cpu().numpy().astype(np.float32), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._blue_obs is None:
            raise RuntimeError("call reset() before step()")
        arr = np.asarray(actions)
        if arr.shape != (self.num_envs, 3):
            raise ValueError(f"actions must have shape ({self.num_envs}, 3), got {arr.shape}")
        dev = self._sim.device
        if self.config.action_mode == "discrete":
            # As in the single env: float indices are refused, not truncated by astype.
            if not np.issubdtype(arr.dtype, np.integer):
                raise ValueError(f"discrete actions must be integers, got dtype {arr.dtype}")
            red = torch.as_tensor(arr.astype(np.int64), device=dev)
        else:
            red = torch.as_tensor(arr, device=dev).to(self._sim.dtype)
        out = self._sim.step(_full_actions(self._sim, red, self._blue_obs))
        self._blue_obs = out.obs[:, 1].clone()
        done = out.done.cpu().numpy()
        info = {
            "final_obs": out.final_obs[:, 0].cpu().numpy().astype(np.float32),
            "_final_obs": done,
            "winner": out.winner.cpu().numpy(),
            "_winner": done,
            "end_reason": out.end_reason.cpu().numpy(),
            "_end_reason": done,
        }
        return (
            out.obs[:, 0].cpu().numpy().astype(np.float32),
            out.reward[:, 0].cpu().numpy().astype(np.float32),
            out.terminated.cpu().numpy(),
            out.truncated.cpu().numpy(),
            info,
        )
