"""The sim's learning recipe: the prior a fresh policy starts from (``ppo.policy_bias``)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from sim.config import SimConfig

SIM_FIRE_LOGIT = -4.0
"""The initial bias of a fresh sim policy's fire logit (``ppo.policy_bias``): it fires in
about 1.8 % of its decisions, not in half of them."""


def sim_policy_bias(sim: dict[str, Any]) -> list[float]:
    """The policy head's initial biases for the sim's action interface: every component
    uniform but fire, taken with probability σ(:data:`SIM_FIRE_LOGIT`) (continuous actions:
    the fire mean that gives the same probability of exceeding 0.5 with σ = 1)."""
    if sim.get("action_mode", SimConfig.action_mode) == "continuous":
        p_fire = 1.0 / (1.0 + math.exp(-SIM_FIRE_LOGIT))
        return [0.0, 0.0, round(0.5 - statistics.NormalDist().inv_cdf(1.0 - p_fire), 3)]
    return [0.0] * 7 + [SIM_FIRE_LOGIT]
