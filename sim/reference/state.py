"""The scalar reference's fighter and missile state, shared by the simulator (``sim/reference/scalar.py``)
and its observation builder (``sim/reference/obs.py``) so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ReferenceFighter:
    """One fighter's state; plain attributes so tests can read and set them."""

    pos: list[float]
    vel: list[float]
    throttle: float = 1.0
    rudder: float = 0.0
    alive: bool = True
    missiles_left: int = 0
    since_launch_steps: int = 0
    fire_request: bool = False


@dataclass
class ReferenceMissile:
    """One missile slot's state; its owner is the slot's side, its target the other fighter."""

    active: bool = False
    pos: list[float] = field(default_factory=lambda: [0.0, 0.0])
    vel: list[float] = field(default_factory=lambda: [0.0, 0.0])
    rudder: float = 0.0
    flight_steps: int = 0
