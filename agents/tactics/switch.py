"""``switch``: a fighter that changes its mind. It holds nine training ideas as members and,
in each episode, flies one of them for a while, then another, on a schedule drawn per episode.

A fixed tactic flies one idea from the first second to the last, so a learner can tell from the
opening which thresholds it faces and keep to a plan made for them. Against ``switch`` the plan
that held for the first minute may be wrong for the next: the opponent that cranked may now
pump, drag or run. What keeps winning is reading what the enemy does now (its heading, its
missiles), which is what a fighter needs against tactics it never met.

The schedule: :data:`SEGMENTS` segments per episode, each lasting a time drawn from an
exponential distribution with mean ``mean_hold_s``; each segment flies a member drawn uniformly
among those other than the previous segment's (a switch always changes the tactic), and the last
segment flies to the end. The members draw their own parameters over their training ranges
(:data:`~agents.tactics.split.TRAINING_RANGES`) per episode, so ``switch`` meets nothing held out
whatever its own draw. Like every tactic it is a rule of the observation (the elapsed time is
read from ``time.time_left``), batched with no host sync and compilable.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch

from agents.tactics.base import Ranges, ScheduledTactic, TacticAgent
from agents.tactics.defence import (
    Commands,
    DragTactic,
    EarlyTactic,
    ExtendTactic,
    FleeTactic,
    PumpTactic,
)
from agents.tactics.offence import BluffTactic, EnergyTactic, LadderTactic, LateTactic
from agents.tactics.split import TRAINING_RANGES
from sim.config import SimConfig
from sim.layout import ObsLayout

MEMBERS: tuple[type[TacticAgent], ...] = (PumpTactic, DragTactic, LateTactic, EarlyTactic, EnergyTactic,
                                          LadderTactic, BluffTactic, ExtendTactic, FleeTactic)
"""What ``switch`` flies: the nine training ideas it was built with, each over its training ranges
(not itself, not ``wander``, which flies no idea to switch to, and not ``reply``, which came
later: a member more would change every schedule ``switch`` draws, and its recorded runs would
no longer replay)."""

SEGMENTS = 16
"""Segments per episode: at the shortest documented mean hold (10 s) they cover 160 s on
average of the 300 s episode, at the training range's (20 s) 320 s."""


@dataclass(frozen=True)
class SwitchParams:
    """Parameters of ``switch``."""

    mean_hold_s: float = 60.0
    """Fly each member for a time drawn from an exponential distribution with this mean, then
    switch to another (10–300)."""


class SwitchTactic(ScheduledTactic):
    """**Switch tactics mid-fight.** Fly one of the training tactics, then, after a random hold
    (mean ``mean_hold_s``), another, and so on (see the module docstring)."""

    name = "switch"
    params_type = SwitchParams
    ranges = MappingProxyType({"mean_hold_s": (10.0, 300.0)})
    segments = SEGMENTS
    plan_dtype = torch.int64
    """The plan: which member each segment flies (an index into :data:`MEMBERS`)."""

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
        # Each member draws its parameters from its own generator, seeded apart from the schedule's.
        self.members = [cls(num_envs, layout, device, action_mode, sim_config, seed + 1 + i,
                            draw=TRAINING_RANGES[cls.name]) for i, cls in enumerate(MEMBERS)]
        super().__init__(num_envs, layout, device, action_mode, sim_config, seed, params, draw)

    def draw_plan(self, generator: torch.Generator | None) -> torch.Tensor:
        """A member per segment, uniform for the first, then always another than the one before."""
        n = self.num_envs
        first = torch.randint(0, len(MEMBERS), (n, 1), generator=generator, device=self.device)
        step = torch.randint(1, len(MEMBERS), (n, SEGMENTS - 1), generator=generator, device=self.device)
        return torch.cat([first, first + step.cumsum(1)], 1) % len(MEMBERS)

    def reset(self, env_mask: torch.Tensor) -> None:
        """Draw a new schedule (and ``mean_hold_s`` where it is random) and new member
        parameters for the environments where ``env_mask`` is true. In place, with no host read."""
        super().reset(env_mask)
        for member in self.members:
            member.reset(env_mask)

    def member(self, obs: torch.Tensor) -> torch.Tensor:
        """Which member flies now, per environment (int64 ``[N]``, an index into :data:`MEMBERS`)."""
        return self.segment_plan(obs)

    def commands(self, obs: torch.Tensor) -> Commands:
        """The commands of the member flying now."""
        pick = self.member(obs).unsqueeze(-1)
        outs = [m.commands(obs) for m in self.members]
        rudder, throttle, fire = (torch.stack([o[k].to(obs.dtype) for o in outs], 1).gather(1, pick).squeeze(1)
                                  for k in range(3))
        return rudder, throttle, fire > 0.5

    def prepare(self) -> None:
        super().prepare()
        for member in self.members:
            member.prepare()

    def generators(self) -> list[torch.Generator]:
        """The schedule's generator and every member's."""
        return [*super().generators(), *(g for m in self.members for g in m.generators())]

    def to(self, device: torch.device | str) -> SwitchTactic:
        """Move to ``device`` with the members, keeping each environment's schedule."""
        for member in self.members:
            member.to(device)
        super().to(device)
        return self
