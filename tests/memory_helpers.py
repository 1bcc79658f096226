"""What the tests of the observation's memory (past frames, the trace) share: short episodes,
random actions for both sides, a small learner on a given sim's layout."""

from __future__ import annotations

import torch

from learner import ActionSpec, PPOConfig, PPOLearner
from sim.config import SimConfig
from sim.layout import ObsLayout

SHORT = SimConfig(max_time_s=20.0)
"""Episodes of 40 decisions, so a short run sees many of them end and restart."""


def random_actions(generator: torch.Generator, n: int) -> torch.Tensor:
    """Discrete actions ``[n, 2, 3]`` for both sides, drawn from ``generator``."""
    return torch.stack([torch.randint(0, 3, (n, 2), generator=generator),
                        torch.randint(0, 3, (n, 2), generator=generator),
                        torch.randint(0, 2, (n, 2), generator=generator)], -1)


def make_learner(config: SimConfig) -> PPOLearner:
    """A tiny learner whose network reads ``config``'s observation layout."""
    layout = ObsLayout.from_config(config)
    return PPOLearner(PPOConfig(hidden_sizes=(8,)), layout.size, ActionSpec.for_sim(config),
                      obs_layout=layout.metadata())
