"""``wander``: a pilot with no idea at all. It alternates, on a schedule drawn per episode, between
closing on the enemy and holding a random turn, fires whenever a shot inside the reach comes up
and drags a live inbound missile.

Every other tactic of the library flies one idea of BVR combat, so whatever a learner meets in
training, the enemy's heading follows a rule of the geometry: after its shot a training tactic
cranks, pumps, drags or runs at angles its rule fixes. ``wander``'s heading follows no rule: it may
be turning away, beaming or closing at any moment, its missile in the air or not. A learner that
meets it cannot keep to a plan made for the enemy's thresholds; it has to read what the enemy does
now. It is domain randomisation of the enemy's flying, the way ``random`` is of its actions
(``random`` changes its command every decision, so it flies an even wobble and empties its rack at
once; ``wander`` holds each turn for seconds and fires only inside its reach).

The schedule: :data:`SEGMENTS` segments per episode, each lasting a time drawn from an exponential
distribution with mean ``mean_hold_s``; a segment closes on the enemy (pursuit) with probability
``pursue_share`` and otherwise holds a rudder drawn uniformly from {−1, 0, +1}; the last segment
flies to the end. Like every tactic it is a rule of the observation (the elapsed time is read from
``time.time_left``), batched with no host sync and compilable. A training tactic only: it has no
held-out ranges.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import torch

from agents.tactics.base import ScheduledTactic
from agents.tactics.defence import Commands

SEGMENTS = 64
"""Segments per episode: at the shortest mean hold (5 s) they cover 320 s on average, more than
the 300 s episode."""


@dataclass(frozen=True)
class WanderParams:
    """Parameters of ``wander``."""

    mean_hold_s: float = 15.0
    """Hold each segment for a time drawn from an exponential distribution with this mean (5–60)."""
    pursue_share: float = 0.5
    """Share of the segments that close on the enemy instead of holding a random turn (0.2–0.8)."""
    launch_fraction: float = 0.8
    """Fire, with no own missile in the air, at this fraction of the reach against the enemy
    flying straight, the enemy within 30° of the nose (0.5–1.0)."""
    defend_tti_s: float = 25.0
    """Drag a live inbound missile with a time to impact under this (10–40)."""


class WanderTactic(ScheduledTactic):
    """**No idea at all.** Close on the enemy or hold a random turn, segment by segment, on a
    schedule drawn per episode; fire inside the reach, drag what comes (see the module docstring)."""

    name = "wander"
    params_type = WanderParams
    ranges = MappingProxyType({"mean_hold_s": (5.0, 60.0), "pursue_share": (0.2, 0.8),
                               "launch_fraction": (0.5, 1.0), "defend_tti_s": (10.0, 40.0)})

    segments = SEGMENTS  # its plan: the rudder each segment holds, NaN where it closes on the enemy

    def draw_plan(self, generator: torch.Generator | None) -> torch.Tensor:
        """Per segment a rudder from {−1, 0, +1}, or NaN (close on the enemy) with probability
        ``pursue_share``."""
        shape = (self.num_envs, SEGMENTS)
        pursue = torch.rand(shape, generator=generator, device=self.device) < self.param("pursue_share")[:, None]
        rudder = torch.randint(-1, 2, shape, generator=generator, device=self.device).to(self.plan_dtype)
        return torch.where(pursue, torch.full_like(rudder, float("nan")), rudder)

    def commands(self, obs: torch.Tensor) -> Commands:
        """Close or turn as the schedule says, fire inside the reach, drag what comes."""
        turn = self.segment_plan(obs).to(obs.dtype)
        rudder = torch.where(torch.isnan(turn), self.pursuit(obs), turn)
        rudder, threatened = self.drag(obs, rudder, self.param("defend_tti_s"))
        fire = self.shot(obs, self.param("launch_fraction")) & ~threatened
        return rudder, torch.ones_like(rudder), fire
