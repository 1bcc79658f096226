"""Plug-ins that break their contracts, for the pipeline's safety tests (imported by spec, e.g.
``--reward tests.plugins_faulty:NaNReward``)."""

from __future__ import annotations

import torch

from agents.base import BaseAgent
from rewards.base import BaseReward


class NaNReward(BaseReward):
    """NaN for every transition."""

    def compute(self, obs, final_obs, actions, done, info):  # type: ignore[no-untyped-def]
        return torch.full((obs.shape[0],), float("nan"), device=obs.device)


class HugeReward(BaseReward):
    """Finite, but so large that returns overflow to inf in the learner."""

    def compute(self, obs, final_obs, actions, done, info):  # type: ignore[no-untyped-def]
        return torch.full((obs.shape[0],), 3e38, device=obs.device)


class OneRowOpponent(BaseAgent):
    """Returns one action row for all environments (would be broadcast silently)."""

    def act(self, obs):  # type: ignore[no-untyped-def]
        return torch.zeros(1, 3, dtype=torch.int64, device=obs.device)


class BrokenConstructor(BaseAgent):
    """Raises while being built."""

    def __init__(self, num_envs: int) -> None:
        raise RuntimeError("cannot build this opponent")
