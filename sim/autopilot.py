"""The built-in pursuit opponent (sim/RULES.md), acting on a flyer's own observation."""

from __future__ import annotations

import torch

from sim.layout import ObsLayout

PURSUIT_DEADBAND = 0.02
"""|bearing sine| under which pursuit holds its nose (unless the target is behind)."""


def pursuit_actions(obs: torch.Tensor, layout: ObsLayout) -> torch.Tensor:
    """Discrete actions ``[N, 3]`` that turn towards the enemy at full throttle, never firing.

    ``obs`` is ``[N, D]``: each row one flyer's egocentric observation.
    """
    bs = obs[:, layout.index("enemy.bearing_sin")]
    bc = obs[:, layout.index("enemy.bearing_cos")]
    left = (bs > PURSUIT_DEADBAND) | ((bs.abs() <= PURSUIT_DEADBAND) & (bc < 0))
    right = bs < -PURSUIT_DEADBAND
    rudder_idx = 1 + left.long() - right.long()
    actions = torch.empty(obs.shape[0], 3, dtype=torch.int64, device=obs.device)
    actions[:, 0] = rudder_idx
    actions[:, 1] = 2
    actions[:, 2] = 0
    return actions
