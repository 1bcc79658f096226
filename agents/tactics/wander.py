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
from typing import Any

import torch

from agents.base import seeded_generator
from agents.tactics.base import Ranges, TacticAgent, exponential_schedule
from agents.tactics.defence import Commands
from sim.config import SimConfig
from sim.device import canonical_device
from sim.layout import ObsLayout

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


class WanderTactic(TacticAgent):
    """**No idea at all.** Close on the enemy or hold a random turn, segment by segment, on a
    schedule drawn per episode; fire inside the reach, drag what comes (see the module docstring)."""

    name = "wander"
    params_type = WanderParams
    ranges = MappingProxyType({"mean_hold_s": (5.0, 60.0), "pursue_share": (0.2, 0.8),
                               "launch_fraction": (0.5, 1.0), "defend_tti_s": (10.0, 40.0)})

    def __init__(
        self,
        num_envs: int,
        layout: ObsLayout,
        device: torch.device | str = "cpu",
        action_mode: str = "discrete",
        sim_config: SimConfig | None = None,
        seed: int = 0,
        params: Any = None,
        draw: Ranges | None = None,
    ):
        place = canonical_device(device)
        self.ends_s = torch.empty(num_envs, SEGMENTS, device=place)
        self.turn = torch.empty(num_envs, SEGMENTS, device=place)
        """Per segment: the rudder it holds, or NaN where it closes on the enemy."""
        super().__init__(num_envs, layout, device, action_mode, sim_config, seed, params, draw)

    def _place(self) -> None:
        super()._place()
        self._generator = seeded_generator(self.device, self.seed)  # the schedule is always drawn

    def _redraw(self, env_mask: torch.Tensor) -> None:
        super()._redraw(env_mask)
        gen, shape = self._generator, self.ends_s.shape
        ends = exponential_schedule(gen, shape, self.param("mean_hold_s"))
        pursue = torch.rand(shape, generator=gen, device=self.device) < self.param("pursue_share")[:, None]
        rudder = torch.randint(-1, 2, shape, generator=gen, device=self.device).to(self.turn.dtype)
        turn = torch.where(pursue, torch.full_like(rudder, float("nan")), rudder)
        mask = env_mask.unsqueeze(-1)
        self.ends_s.copy_(torch.where(mask, ends, self.ends_s))
        self.turn.copy_(torch.where(mask, turn, self.turn))

    def reset(self, env_mask: torch.Tensor) -> None:
        """Draw a new schedule (and the parameters where they are random) for the environments
        where ``env_mask`` is true. In place, with no host read."""
        self._check_mask(env_mask)
        self._redraw(env_mask)

    def segment_turn(self, obs: torch.Tensor) -> torch.Tensor:
        """The rudder the segment flying now holds, NaN where it closes on the enemy (``[N]``)."""
        elapsed = (1.0 - self.col(obs, "time.time_left")) * self.sim_config.max_time_s
        segment = (self.ends_s <= elapsed.unsqueeze(-1)).sum(-1).clamp(max=SEGMENTS - 1)
        return self.turn.gather(1, segment.unsqueeze(-1)).squeeze(-1)

    def commands(self, obs: torch.Tensor) -> Commands:
        """Close or turn as the schedule says, fire inside the reach, drag what comes."""
        turn = self.segment_turn(obs).to(obs.dtype)
        rudder = torch.where(torch.isnan(turn), self.pursuit(obs), turn)
        rudder, threatened = self.drag(obs, rudder, self.param("defend_tti_s"))
        fire = self.shot(obs, self.param("launch_fraction")) & ~threatened
        return rudder, torch.ones_like(rudder), fire

    def to(self, device: torch.device | str) -> WanderTactic:
        """Move to ``device`` keeping each environment's schedule."""
        self.ends_s, self.turn = self.ends_s.to(device), self.turn.to(device)
        super().to(device)
        return self
