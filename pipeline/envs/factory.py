"""The factory of one Gymnasium env, in a module that imports only Gymnasium and the plug-in
loader: env worker processes unpickle it, and so import this module, at every start."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from core.plugins import load_object


@dataclass(frozen=True)
class EnvFactory:
    """A picklable zero-argument factory of one Gymnasium env (sent once to a worker process)."""

    spec: str
    """``gym:ID`` or ``package.module:factory``."""
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> gym.Env[Any, Any]:
        if self.spec.startswith("gym:"):
            return gym.make(self.spec[4:], **self.kwargs)
        factory = load_object(self.spec)
        env = factory(**self.kwargs)
        if not isinstance(env, gym.Env):
            raise ValueError(f"{self.spec} returned a {type(env).__name__}, not a gymnasium.Env")
        return env
