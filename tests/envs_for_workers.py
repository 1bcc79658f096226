"""Test-only Gymnasium envs for ``tests/test_process_vec_env.py``, in a module of their own so
that spawned worker processes can import them (they get the test process's ``sys.path``).

Each env learns which env of the pool it is from its reset seed: ``reset(seed=0)`` on the pool
gives env i the seed i.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces


class CounterEnv(gymnasium.Env):
    """obs = [seed, t]; reward t; truncated after ``length`` steps; sleeps ``delay_s`` per step
    when its seed is in ``slow_seeds``. Infos carry a NumPy array and nested values."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's class attribute)

    def __init__(self, length: int = 5, delay_s: float = 0.0, slow_seeds: tuple[int, ...] = ()) -> None:
        self.observation_space = spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.length, self.delay_s, self.slow_seeds = length, delay_s, slow_seeds
        self.seed_value, self.t = -1, 0
        self.big = b""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.seed_value = seed
        self.t = 0
        return self._obs(), {"start": self.seed_value}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.seed_value in self.slow_seeds:
            time.sleep(self.delay_s)
        self.t += 1
        info = {"action": int(action), "vec": np.array([self.t, 2 * self.t], dtype=np.int16), "nested": {"t": self.t}}
        return self._obs(), float(self.t), False, self.t >= self.length, info

    def _obs(self) -> np.ndarray:
        return np.array([self.seed_value, self.t], dtype=np.float32)

    def has_module(self, name: str) -> bool:
        """Whether this worker process has imported module ``name``."""
        return name in sys.modules

    def payload(self, n: int) -> bytes:
        """``n`` bytes (to exceed the message limit)."""
        return b"x" * n


class FaultyEnv(CounterEnv):
    """A :class:`CounterEnv` whose env ``fault_seed`` misbehaves at step ``at_step``: ``raise``
    (ValueError), ``exit`` (``os._exit``), ``segv`` (SIGSEGV), ``hang`` (sleeps an hour). With
    ``marker`` the fault happens once per test (the file records it); without, every time.
    ``reset_raise`` makes every reset raise. ``fault_seed=None``: every env misbehaves."""

    def __init__(self, mode: str, fault_seed: int | None = 1, at_step: int = 3, marker: str | None = None,
                 length: int = 50) -> None:
        super().__init__(length=length)
        if mode not in ("raise", "exit", "segv", "hang", "reset_raise"):
            raise ValueError(f"unknown mode {mode!r}")
        self.mode, self.fault_seed, self.at_step, self.marker = mode, fault_seed, at_step, marker

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if self.mode == "reset_raise":
            raise RuntimeError(f"reset refused (seed {seed})")
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.fault_seed in (None, self.seed_value) and self.t + 1 == self.at_step and self._arm():
            if self.mode == "raise":
                raise ValueError(f"boom at step {self.at_step}")
            if self.mode == "exit":
                os._exit(3)
            if self.mode == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            if self.mode == "hang":
                time.sleep(3600)
        return super().step(action)

    def _arm(self) -> bool:
        if self.marker is None:
            return True
        path = Path(self.marker)
        if path.exists():
            return False
        path.write_text(self.mode)
        return True


class DictObsEnv(CounterEnv):
    """Observations as a Dict space (refused by ProcessVecEnv)."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Dict({"pos": spaces.Box(-1.0, 1.0, (2,), np.float32)})


class TextActionEnv(CounterEnv):
    """Actions as a Text space (refused by ProcessVecEnv)."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = spaces.Text(8)


def crash_loop_env() -> FaultyEnv:
    """An env whose worker segfaults 30 steps into every episode (``--env envs_for_workers:crash_loop_env``)."""
    return FaultyEnv("segv", fault_seed=None, at_step=30)


def exits_when_made() -> CounterEnv:
    """A factory that ends its process with ``sys.exit(0)``."""
    sys.exit(0)


def segfaults_when_made() -> CounterEnv:
    """A factory that segfaults."""
    os.kill(os.getpid(), signal.SIGSEGV)
    return CounterEnv()


def reset_raises() -> FaultyEnv:
    """An env whose every reset raises."""
    return FaultyEnv("reset_raise")


class WrongShapeEnv(CounterEnv):
    """Resets to an observation of 3 values in a space of 2."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        return np.zeros(3, np.float32), {}


class SegfaultOnResetEnv(CounterEnv):
    """Segfaults in its reset."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        os.kill(os.getpid(), signal.SIGSEGV)
        return super().reset(seed=seed, options=options)


class SlowResetInWorkerEnv(CounterEnv):
    """Takes a minute over each reset in an env worker (elsewhere, at once): a launch with it
    stays in its start, its workers' shared blocks already made."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        import multiprocessing

        if multiprocessing.current_process().name.startswith("env-worker"):
            time.sleep(60)
        return super().reset(seed=seed, options=options)
