"""Tactics built around how to survive the enemy's shots: pump, extend, notch, drag, early defence.

Each is a :class:`~agents.tactics.base.TacticAgent`: a frozen dataclass of parameters (the
defaults) and the documented range of each (``ranges``), read per environment with ``param``.
A missile is *live* while present, closing and at least the tactic's spent speed; its *time to
impact* is its range over its closing speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import torch

from agents.tactics.base import TacticAgent, hold_at_angle
from sim.reach.missile import SPENT_SPEED_MPS

Commands = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class PumpParams:
    """Parameters of ``pump``."""

    launch_fraction: float = 0.9
    """Fire at this fraction of the reach against the enemy flying straight (0.6–1.0)."""
    crank_angle_deg: float = 45.0
    """While the own missile flies, hold the enemy this far off the nose (20–60)."""
    defend_tti_s: float = 25.0
    """Drag a live inbound missile with a time to impact under this (10–40)."""
    pump_fraction: float = 1.1
    """With no own missile flying, turn cold once the range is under this fraction of the enemy's
    no-escape reach against me (its reach against me turning away from a heading straight at
    it: inside it a shot can no longer be outrun) (1.0–1.8) ..."""
    recommit_fraction: float = 1.6
    """... and fly cold until it is over this fraction, then turn back in (1.5–2.5)."""


class PumpTactic(TacticAgent):
    """**Pump and re-commit.** Shoot at ``launch_fraction`` of the reach and crank while the
    missile flies; once it is gone, if still inside the enemy's reach, turn cold (the enemy
    behind) and fly away until out of it by ``recommit_fraction``, then turn back in for the
    next shot. A live inbound missile is dragged (put behind) first."""

    name = "pump"
    params_type: ClassVar[type[Any]] = PumpParams  # extend flies the same rule with its own
    ranges = MappingProxyType({"launch_fraction": (0.6, 1.0), "crank_angle_deg": (20.0, 60.0), "defend_tti_s": (10.0, 40.0),
                               "pump_fraction": (1.0, 1.8), "recommit_fraction": (1.5, 2.5)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Defend, crank, pump or engage."""
        rng, enemy_reach = self.range_m(obs), self.enemy_reach_m(obs, hot=True, escape=True)
        flying = self.own_in_flight(obs) > 0
        cold = self.col(obs, "enemy.bearing_cos") < 0
        limit = torch.where(cold, self.param("recommit_fraction"), self.param("pump_fraction"))
        pumping = ~flying & (rng < limit * enemy_reach)
        rudder, fire = self.engage(obs, self.param("launch_fraction"), self.param("crank_angle_deg"))
        rudder = torch.where(pumping & ~fire, self.hold_enemy(obs, 180.0), rudder)
        rudder, threatened = self.drag(obs, rudder, self.param("defend_tti_s"))
        return rudder, torch.ones_like(rudder), fire & ~threatened


@dataclass(frozen=True)
class ExtendParams(PumpParams):
    """Parameters of ``extend``: ``pump``'s shot, crank and defence, and its own pump."""

    pump_fraction: float = 2.2
    """With no own missile flying, turn cold once the range is under this fraction of the enemy's
    no-escape reach against me (from a heading straight at it) (1.8–3.0) ..."""
    recommit_fraction: float = 3.0
    """... and fly cold until it is over this fraction, then turn back in (2.5–4.0)."""


class ExtendTactic(PumpTactic):
    """**Extend and re-engage.** ``pump``'s rule flown wide: after each shot turn cold while
    inside a long multiple of the enemy's no-escape reach and run until far outside it (two and
    a half to four times), so that a pursuer who follows at the distance a short pump turns
    back at is never met hot; the next shot comes only after a long run out and back."""

    name = "extend"
    params_type = ExtendParams
    ranges = MappingProxyType({"launch_fraction": (0.6, 1.0), "crank_angle_deg": (20.0, 60.0), "defend_tti_s": (10.0, 40.0),
                               "pump_fraction": (1.8, 3.0), "recommit_fraction": (2.5, 4.0)})


@dataclass(frozen=True)
class NotchParams:
    """Parameters of ``notch``."""

    launch_fraction: float = 0.9
    """Fire at this fraction of the reach against the enemy flying straight (0.6–1.0)."""
    beam_angle_deg: float = 90.0
    """Hold a live inbound missile this far off the nose (70–110; 90 is the beam)."""
    defend_tti_s: float = 25.0
    """Beam a live inbound missile with a time to impact under this (10–40)."""


class NotchTactic(TacticAgent):
    """**Notch (beam) the missile.** Pure pursuit and a shot at ``launch_fraction`` of the reach;
    against a live inbound missile with a short time to impact, hold it at the beam: the missile
    must keep turning to lead a crossing target, and each turn bleeds its speed."""

    name = "notch"
    params_type = NotchParams
    ranges = MappingProxyType({"launch_fraction": (0.6, 1.0), "beam_angle_deg": (70.0, 110.0), "defend_tti_s": (10.0, 40.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Beam or engage."""
        tti, _, mbs, mbc = self.threat(obs, SPENT_SPEED_MPS)
        threatened = tti < self.param("defend_tti_s")
        fire = self.shot(obs, self.param("launch_fraction")) & ~threatened
        beam = hold_at_angle(mbs, mbc, self.param("beam_angle_deg"), 3.0)
        rudder = torch.where(threatened, beam, self.pursuit(obs))
        return rudder, torch.ones_like(rudder), fire


@dataclass(frozen=True)
class DragParams:
    """Parameters of ``drag``."""

    launch_fraction: float = 0.85
    """Fire at this fraction of the reach against the enemy flying straight (0.6–1.0)."""
    crank_angle_deg: float = 50.0
    """While the own missile flies, hold the enemy this far off the nose (20–60)."""
    defend_tti_s: float = 30.0
    """Start dragging a closing inbound missile with a time to impact under this (10–50)."""
    release_speed_mps: float = 450.0
    """Re-commit once the dragged missile is slower than this (250–700)."""


class DragTactic(TacticAgent):
    """**Drag and re-commit.** Shoot, crank; against an inbound missile put it dead behind at
    full throttle so that it must chase from behind, and turn back in as soon as it has slowed
    under ``release_speed_mps`` (it can no longer catch a fighter coming back at it)."""

    name = "drag"
    params_type = DragParams
    ranges = MappingProxyType({"launch_fraction": (0.6, 1.0), "crank_angle_deg": (20.0, 60.0), "defend_tti_s": (10.0, 50.0),
                               "release_speed_mps": (250.0, 700.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Drag, crank or engage."""
        rudder, fire = self.engage(obs, self.param("launch_fraction"), self.param("crank_angle_deg"))
        rudder, threatened = self.drag(obs, rudder, self.param("defend_tti_s"), self.param("release_speed_mps"))
        return rudder, torch.ones_like(rudder), fire & ~threatened


@dataclass(frozen=True)
class EarlyParams:
    """Parameters of ``early``."""

    launch_fraction: float = 0.8
    """Fire at this fraction of the reach against the enemy flying straight (0.6–1.0)."""
    crank_angle_deg: float = 40.0
    """While the own missile flies, hold the enemy this far off the nose (20–60)."""
    defend_tti_s: float = 60.0
    """Turn cold from any live inbound missile with a time to impact under this (40–90)."""
    spent_speed_mps: float = SPENT_SPEED_MPS
    """An inbound missile slower than this is spent and ignored (300–450)."""
    preempt_fraction: float = 0.8
    """With no own missile up and no shot, turn cold when an enemy pointing at me (within 30°)
    is within this fraction of its reach against me (0.5–1.0)."""


class EarlyTactic(TacticAgent):
    """**Defend early.** Turn cold from an inbound missile as soon as it is launched (any time
    to impact under ``defend_tti_s``), long before it is close, and stay cold until it is spent;
    turn cold even before a launch when inside the reach of an enemy pointing at me with no
    shot of my own; otherwise shoot at ``launch_fraction`` of the reach and crank."""

    name = "early"
    params_type = EarlyParams
    ranges = MappingProxyType({"launch_fraction": (0.6, 1.0), "crank_angle_deg": (20.0, 60.0), "defend_tti_s": (40.0, 90.0),
                               "spent_speed_mps": (300.0, 450.0), "preempt_fraction": (0.5, 1.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Defend early, crank or engage."""
        rudder, fire = self.engage(obs, self.param("launch_fraction"), self.param("crank_angle_deg"))
        # Pre-emptive: no own missile up, no shot now, and inside the reach of an enemy pointing
        # at me with missiles left: turn cold before it launches.
        exposed = ((self.own_in_flight(obs) == 0) & ~fire & (self.col(obs, "enemy.missiles_left") > 0)
                   & (self.col(obs, "enemy.nose_on_cos") > 0.87)
                   & (self.range_m(obs) < self.param("preempt_fraction") * self.enemy_reach_m(obs)))
        rudder = torch.where(exposed, self.hold_enemy(obs, 180.0), rudder)
        rudder, threatened = self.drag(obs, rudder, self.param("defend_tti_s"), self.param("spent_speed_mps"))
        return rudder, torch.ones_like(rudder), fire & ~threatened


@dataclass(frozen=True)
class FleeParams:
    """Parameters of ``flee``."""

    flee_fraction: float = 1.3
    """Turn cold once the range is under this fraction of the enemy's no-escape reach against me
    (from a heading straight at it) (1.0–2.0) ..."""
    recommit_fraction: float = 2.0
    """... and fly cold until it is over this fraction, then turn back in (1.5–3.0)."""
    edge_margin: float = 0.15
    """Within this fraction of the arena's half width of an edge, bend the run along the edge
    instead of across it, harder the closer the edge (0.05–0.3)."""
    defend_tti_s: float = 25.0
    """Run from a live inbound missile (put it behind) with a time to impact under this (10–40)."""


class FleeTactic(TacticAgent):
    """**Flee: a target that must be run down.** Never fires; turns in towards the enemy while
    outside a multiple of its no-escape reach and runs from it (and from any inbound missile
    close to impact) at full throttle once inside, bending the run along the arena's edge rather
    than out of it. Beating it takes what no shooter asks for: closing on a fighter that runs
    at the same speed, cutting the corner as it turns along an edge, and firing only where the
    shot cannot be outrun. A training opponent only (it has no held-out ranges)."""

    name = "flee"
    params_type = FleeParams
    ranges = MappingProxyType({"flee_fraction": (1.0, 2.0), "recommit_fraction": (1.5, 3.0),
                               "edge_margin": (0.05, 0.3), "defend_tti_s": (10.0, 40.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Run from a missile, run from the enemy, or turn in."""
        rng, enemy_reach = self.range_m(obs), self.enemy_reach_m(obs, hot=True, escape=True)
        cold = self.col(obs, "enemy.bearing_cos") < 0
        limit = torch.where(cold, self.param("recommit_fraction"), self.param("flee_fraction"))
        running = rng < limit * enemy_reach
        tti, _, mbs, mbc = self.threat(obs, SPENT_SPEED_MPS)
        threatened = tti < self.param("defend_tti_s")
        from_sin = torch.where(threatened, mbs, self.col(obs, "enemy.bearing_sin"))
        from_cos = torch.where(threatened, mbc, self.col(obs, "enemy.bearing_cos"))
        rudder = torch.where(running | threatened, self.away(obs, from_sin, from_cos), self.pursuit(obs))
        return rudder, torch.ones_like(rudder), torch.zeros_like(rudder, dtype=torch.bool)

    def away(self, obs: torch.Tensor, bearing_sin: torch.Tensor, bearing_cos: torch.Tensor) -> torch.Tensor:
        """Rudder away from what is seen at this bearing, bent inwards near an edge: the
        direction away (in the world frame) plus, per axis, a push back inside growing from 0
        at ``edge_margin`` from the edge to twice a unit at the edge."""
        hc, hs = self.col(obs, "own.heading_cos"), self.col(obs, "own.heading_sin")
        # The threat's world direction is bearing_cos·n + bearing_sin·n⊥, with n = (hc, hs)
        # and n⊥ = (−hs, hc) (sim/layout.py); away is its opposite.
        dx = -(bearing_cos * hc - bearing_sin * hs)
        dy = -(bearing_cos * hs + bearing_sin * hc)
        margin = self.param("edge_margin")

        def inwards(pos: torch.Tensor) -> torch.Tensor:
            return -2.0 * torch.sign(pos) * ((pos.abs() - (1.0 - margin)) / margin).clamp(min=0.0)

        dx = dx + inwards(self.col(obs, "own.x"))
        dy = dy + inwards(self.col(obs, "own.y"))
        # The wanted direction in the body frame: (d·n, d·n⊥); steer it onto the nose.
        return hold_at_angle(-dx * hs + dy * hc, dx * hc + dy * hs, 0.0, 3.0)
