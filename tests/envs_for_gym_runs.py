"""Gymnasium envs that misbehave in a whole run, named by ``--env package.module:factory``: one
that fails only in the end-of-run evaluation, one whose observation is too big to train on.
In a module of their own so that worker processes can import them. Also what a test process
leaves in /dev/shm."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class FailsOnceFileExistsEnv(gym.Env):  # type: ignore[type-arg]
    """A short CartPole-like episode (obs ``[t, 0]``, reward 1, truncated after ``length``
    steps) whose ``step`` fails once the file ``trigger`` exists: ``mode`` ``segv`` (SIGSEGV),
    ``exit`` (``sys.exit(3)``) or ``raise`` (ValueError). With ``trigger`` the run's final
    checkpoint (and a checkpoint interval longer than the run), only the evaluation fails."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's class attribute)

    def __init__(self, trigger: str, mode: str = "segv", length: int = 20) -> None:
        if mode not in ("segv", "exit", "raise"):
            raise ValueError(f"unknown mode {mode!r}")
        self.observation_space = spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.trigger, self.mode, self.length = Path(trigger), mode, length
        self.t = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.trigger.exists():
            if self.mode == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            if self.mode == "exit":
                sys.exit(3)
            raise ValueError("this env fails in the evaluation")
        self.t += 1
        return self._obs(), 1.0, False, self.t >= self.length, {}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, 0.0], dtype=np.float32)


class HugeObservationEnv(gym.Env):  # type: ignore[type-arg]
    """An env whose observation is ``size`` float32 values (5,000,000: 20 MB a step)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's class attribute)

    def __init__(self, size: int = 5_000_000) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (size,), np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, {}


def our_shared_segments() -> set[str]:
    """This process's segments in /dev/shm (env worker blocks, torch's shared tensors); other
    processes' come and go meanwhile."""
    prefixes = (f"mrl{os.getpid()}_", f"torch_{os.getpid()}_")
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {n for n in names if n.startswith(prefixes)}
