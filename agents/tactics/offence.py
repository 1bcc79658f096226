"""Tactics built around when and how to shoot: no-escape shots, late shots, two-shot ladders,
launch-and-leave, keeping energy by turning less, long shots that herd, bluffs from outside the
reach, and an answer to every shot.

Each is a :class:`~agents.tactics.base.TacticAgent`; see :mod:`agents.tactics.defence` for the
terms. All of them drag (put dead behind, full throttle) a live inbound missile whose time to
impact is under their ``defend_tti_s``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import torch

from agents.tactics.base import TacticAgent
from sim.reach.missile import SPENT_SPEED_MPS

Commands = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class SniperParams:
    """Parameters of ``sniper``."""

    no_escape_fraction: float = 0.95
    """Fire only within this fraction of the no-escape reach (0.7–1.0)."""
    cone_deg: float = 20.0
    """Fire only with the enemy within this angle off the nose (10–30)."""
    defend_tti_s: float = 20.0
    """Drag a live inbound missile with a time to impact under this (10–40)."""


class SniperTactic(TacticAgent):
    """**No-escape shots only.** Pure pursuit, and a shot only once the enemy is inside the
    no-escape reach (the reach against a target that turns away at once: it cannot outrun the
    missile whatever it does), one missile at a time."""

    name = "sniper"
    params_type = SniperParams
    ranges = MappingProxyType({"no_escape_fraction": (0.7, 1.0), "cone_deg": (10.0, 30.0), "defend_tti_s": (10.0, 40.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Defend, or pursue and fire inside the no-escape reach."""
        rudder, threatened = self.drag(obs, self.pursuit(obs), self.param("defend_tti_s"))
        fire = (self.can_fire(obs, self.param("cone_deg")) & ~threatened & (self.own_in_flight(obs) == 0)
                & (self.range_m(obs) <= self.param("no_escape_fraction") * self.no_escape_reach_m(obs)))
        return rudder, torch.ones_like(rudder), fire


@dataclass(frozen=True)
class LateParams:
    """Parameters of ``late``."""

    launch_fraction: float = 0.6
    """Hold fire until this fraction of the reach against the enemy flying straight (0.3–0.7)."""
    crank_angle_deg: float = 45.0
    """While the own missile flies, hold the enemy this far off the nose (10–50)."""
    defend_tti_s: float = 40.0
    """Drag a live inbound missile with a time to impact under this (15–45)."""


class LateTactic(TacticAgent):
    """**Shoot late.** Defend the enemy's long shots and keep closing; fire only deep inside the
    reach (``launch_fraction``), where a turn away comes too late, then crank."""

    name = "late"
    params_type = LateParams
    ranges = MappingProxyType({"launch_fraction": (0.3, 0.7), "crank_angle_deg": (10.0, 50.0), "defend_tti_s": (15.0, 45.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Defend, crank or engage with a late shot."""
        rudder, fire = self.engage(obs, self.param("launch_fraction"), self.param("crank_angle_deg"))
        rudder, threatened = self.drag(obs, rudder, self.param("defend_tti_s"))
        return rudder, torch.ones_like(rudder), fire & ~threatened


@dataclass(frozen=True)
class LadderParams:
    """Parameters of ``ladder``."""

    launch_fraction: float = 0.95
    """First shot at this fraction of the reach against the enemy flying straight (0.7–1.0)."""
    second_gap_s: float = 4.0
    """Second shot once the first has flown this long (1–10) ..."""
    second_fraction: float = 0.8
    """... and the range is within this fraction of the reach (0.5–1.0)."""
    crank_angle_deg: float = 45.0
    """Once both rungs fly, hold the enemy this far off the nose (20–60)."""
    defend_tti_s: float = 25.0
    """Drag a live inbound missile with a time to impact under this (10–40)."""


class LadderTactic(TacticAgent):
    """**Two-shot ladder.** A first shot at long range and a second a few seconds later from
    closer in, so that the enemy's turn to defeat one leaves it in the reach of the other; keep
    pointing at the enemy until the second is off, then crank while they fly. Needs ``missiles_per_fighter`` >= 2 (with 1 it fires single shots)."""

    name = "ladder"
    params_type = LadderParams
    ranges = MappingProxyType({"launch_fraction": (0.7, 1.0), "second_gap_s": (1.0, 10.0), "second_fraction": (0.5, 1.0),
                               "crank_angle_deg": (20.0, 60.0), "defend_tti_s": (10.0, 40.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Defend, crank, fire the first or the second rung."""
        in_flight = self.own_in_flight(obs)
        rudder, first = self.engage(obs, self.param("launch_fraction"), self.param("crank_angle_deg"))
        # Keep the enemy in the launch cone until the second rung is off (or none is left).
        rung_to_come = (in_flight == 1) & (self.col(obs, "own.missiles_left") > 0)
        rudder = torch.where(rung_to_come, self.pursuit(obs), rudder)
        flown_s = self.col(obs, "own_missile[0].flight_time") * self.sim_config.missile_max_flight_time_s
        second = (self.can_fire(obs, 30.0) & (in_flight == 1) & (flown_s >= self.param("second_gap_s"))
                  & (self.range_m(obs) <= self.param("second_fraction") * self.reach_m(obs)))
        rudder, threatened = self.drag(obs, rudder, self.param("defend_tti_s"))
        return rudder, torch.ones_like(rudder), (first | second) & ~threatened


@dataclass(frozen=True)
class SkateParams:
    """Parameters of ``skate``."""

    launch_fraction: float = 0.9
    """Fire at this fraction of the reach against the enemy flying straight (0.6–1.0)."""
    leave_angle_deg: float = 150.0
    """Right after the launch turn until the enemy is this far off the nose (110–180) and hold
    it there while the missile flies."""
    defend_tti_s: float = 25.0
    """Drag a live inbound missile with a time to impact under this (10–40)."""


class SkateTactic(TacticAgent):
    """**Launch and leave.** The missile guides itself, so after the shot turn away at once
    (``leave_angle_deg``) to stay out of the enemy's answer, and turn back in only when the
    missile is gone."""

    name = "skate"
    params_type = SkateParams
    ranges = MappingProxyType({"launch_fraction": (0.6, 1.0), "leave_angle_deg": (110.0, 180.0), "defend_tti_s": (10.0, 40.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Defend, leave or engage."""
        rudder, fire = self.engage(obs, self.param("launch_fraction"), self.param("leave_angle_deg"))
        rudder, threatened = self.drag(obs, rudder, self.param("defend_tti_s"))
        return rudder, torch.ones_like(rudder), fire & ~threatened


@dataclass(frozen=True)
class EnergyParams:
    """Parameters of ``energy``."""

    launch_fraction: float = 0.9
    """Fire at this fraction of the reach against the enemy flying straight (0.6–1.0)."""
    deadband_deg: float = 10.0
    """No rudder while the enemy (or the crank angle) is within this (3–20): every turn costs
    speed, and speed is reach."""
    crank_angle_deg: float = 35.0
    """While the own missile flies, hold the enemy this far off the nose (20–60)."""
    defend_tti_s: float = 25.0
    """Drag a live inbound missile with a time to impact under this (8–30)."""


class EnergyTactic(TacticAgent):
    """**Keep energy.** Full throttle throughout and turn as little as possible (wide dead bands,
    a shallow crank), since each turn bleeds the speed that makes the missile's reach."""

    name = "energy"
    params_type = EnergyParams
    ranges = MappingProxyType({"launch_fraction": (0.6, 1.0), "deadband_deg": (3.0, 20.0), "crank_angle_deg": (20.0, 60.0),
                               "defend_tti_s": (8.0, 30.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Defend, crank or engage, turning only outside the dead band."""
        band = self.param("deadband_deg")
        flying = self.own_in_flight(obs) > 0
        rudder = torch.where(flying, self.hold_enemy(obs, self.param("crank_angle_deg"), band),
                             self.pursuit(obs, band))
        rudder, threatened = self.drag(obs, rudder, self.param("defend_tti_s"))
        fire = self.shot(obs, self.param("launch_fraction")) & ~threatened
        return rudder, torch.ones_like(rudder), fire


@dataclass(frozen=True)
class HerdParams:
    """Parameters of ``herd``."""

    launch_fraction: float = 0.95
    """Fire at this fraction of the reach against the enemy flying straight (0.8–1.0)."""
    max_in_flight: float = 2.0
    """Fire again while fewer than this many own missiles fly (1–3, rounded down)."""
    defend_tti_s: float = 20.0
    """Drag a live inbound missile with a time to impact under this (10–40)."""


class HerdTactic(TacticAgent):
    """**Herd with long shots.** Pure pursuit and a shot from the edge of the reach whenever one
    can go, several in the air at once: each forces the enemy to turn away and run, and an enemy
    that always runs straight back from the threat runs out of the arena, which destroys it."""

    name = "herd"
    params_type = HerdParams
    ranges = MappingProxyType({"launch_fraction": (0.8, 1.0), "max_in_flight": (1.0, 3.0), "defend_tti_s": (10.0, 40.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Defend, or pursue and keep firing from long range."""
        rudder, threatened = self.drag(obs, self.pursuit(obs), self.param("defend_tti_s"))
        fire = self.shot(obs, self.param("launch_fraction"), max_in_flight=torch.floor(self.param("max_in_flight")))
        return rudder, torch.ones_like(rudder), fire & ~threatened


@dataclass(frozen=True)
class BluffParams:
    """Parameters of ``bluff``."""

    bluff_fraction: float = 2.0
    """Bluff from up to this multiple of the reach against the enemy flying straight (1.3–3.0)."""
    max_in_flight: float = 2.0
    """Bluff again while fewer than this many own missiles fly (1–3, rounded down)."""
    reserve: float = 2.0
    """Keep this many missiles (0–3, rounded down) for a real shot."""
    launch_fraction: float = 0.85
    """Fire the reserve at this fraction of the reach (0.7–1.0), one missile in the air at a time."""
    defend_tti_s: float = 20.0
    """Drag a live inbound missile with a time to impact under this (10–40)."""


class BluffTactic(TacticAgent):
    """**Bluff from outside the reach.** Pure pursuit and shots from far outside the range any
    missile could cover, several in the air: they cannot hit, but an enemy that turns and runs
    from every inbound missile is driven off (and out of the arena). The last ``reserve``
    missiles are kept for a real shot from inside the reach."""

    name = "bluff"
    params_type = BluffParams
    ranges = MappingProxyType({"bluff_fraction": (1.3, 3.0), "max_in_flight": (1.0, 3.0), "reserve": (0.0, 3.0),
                               "launch_fraction": (0.7, 1.0), "defend_tti_s": (10.0, 40.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Defend, or pursue and bluff while missiles beyond the reserve remain, then shoot."""
        rudder, threatened = self.drag(obs, self.pursuit(obs), self.param("defend_tti_s"))
        left = self.col(obs, "own.missiles_left") * self.sim_config.missiles_per_fighter
        bluffing = left > torch.floor(self.param("reserve")) + 0.5
        fire = torch.where(bluffing,
                           self.shot(obs, self.param("bluff_fraction"),
                                     max_in_flight=torch.floor(self.param("max_in_flight"))),
                           self.shot(obs, self.param("launch_fraction")))
        return rudder, torch.ones_like(rudder), fire & ~threatened


@dataclass(frozen=True)
class ReplyParams:
    """Parameters of ``reply``."""

    reply_fraction: float = 1.0
    """Fire back, with a live enemy missile inbound, from up to this multiple of the reach against
    the enemy flying straight (0.8–1.3)."""
    launch_fraction: float = 0.7
    """With nothing inbound, fire first only at this fraction of the reach (0.5–0.9)."""
    crank_angle_deg: float = 40.0
    """Hold the enemy this far off the nose while an own missile flies (20–60)."""
    defend_tti_s: float = 20.0
    """Drag a live inbound missile with a time to impact under this (10–40)."""


class ReplyTactic(TacticAgent):
    """**Answer every shot.** Patient with its first shot (deep inside the reach), it fires back
    the moment the enemy commits: with a live enemy missile inbound and none of its own in the
    air it returns fire from up to ``reply_fraction`` of the reach, cranks while both missiles
    fly and drags the inbound one only when its time to impact falls under ``defend_tti_s``. A
    fighter that presses on after its own shot meets the answer head on."""

    name = "reply"
    params_type = ReplyParams
    ranges = MappingProxyType({"reply_fraction": (0.8, 1.3), "launch_fraction": (0.5, 0.9),
                               "crank_angle_deg": (20.0, 60.0), "defend_tti_s": (10.0, 40.0)})

    def commands(self, obs: torch.Tensor) -> Commands:
        """Defend, crank or pursue; answer a live inbound missile, else shoot deep inside the reach."""
        rudder, first = self.engage(obs, self.param("launch_fraction"), self.param("crank_angle_deg"))
        rudder, threatened = self.drag(obs, rudder, self.param("defend_tti_s"))
        inbound = torch.isfinite(self.threat(obs, SPENT_SPEED_MPS)[0])
        answer = self.shot(obs, self.param("reply_fraction")) & inbound
        return rudder, torch.ones_like(rudder), (first & ~threatened) | answer
