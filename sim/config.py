"""The simulator's one configuration: a frozen, validated dataclass.

Every physical quantity is in SI units (m, s, m/s, rad); names carry the unit where it could be
ambiguous. A bad value raises ``ValueError`` naming the field, at construction time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.bounds import Bounds, check_bounds, count, positive
from core.coerce import coerce

G = 9.8
"""Standard gravity used by the model, m/s²."""

MAX_DECISION_S = 10.0
"""Longest sim time one decision step may cover (``dt_s · substeps · time_scale``).

A decision is only worth taking if it is short next to what it decides about: a missile's
motor burns for 10 s, in which the missile flies some 10 km, and a fighter at full rudder
turns half a circle in about 12 s, so a longer decision could not dodge or time a shot. It
also bounds the work of one decision (100 physics steps at the default dt): without it,
``time_scale = 1e9`` would be accepted and one decision step would never end.
"""



DAY_S = 86_400.0
"""A day in seconds: the longest cooldown or motor burn a config may ask for."""

SPAWN_WIDE_MARGIN_M = 5_000.0
"""How far inside the arena's edge a ``spawn_wide`` start keeps both fighters at least."""
SIM_BOUNDS: dict[str, Bounds] = {
    "dt_s": Bounds(1e-3, 1.0),
    "substeps": count(1, 10_000),
    "time_scale": positive(1e9),
    "max_time_s": positive(1e9),
    "missiles_per_fighter": count(1, 64),
    "fire_cooldown_s": positive(DAY_S),
    "hit_radius_m": positive(1e6),
    "missile_burn_time_s": positive(DAY_S),
    "missile_min_speed_mps": positive(10_000.0),
    "missile_max_flight_time_s": positive(3600.0),
    "launch_offset_m": Bounds(0.0, 1e6),
    "nav_constant": positive(100.0),
    "arena_half_width_m": positive(1e9),
    "spawn_separation_m": positive(1e9),
    "spawn_heading_jitter_rad": Bounds(0.0, math.pi),
    "spawn_speed_mps": positive(10_000.0),
    "spawn_shift_m": Bounds(0.0, 1e9),
    "spawn_partial_ammo": Bounds(0.0, 1.0),
    "spawn_wide": Bounds(0.0, 1.0),
    "head_on_separation_m": positive(1e9),
    "head_on_speed_mps": positive(10_000.0),
    "obs_incoming_missiles": count(1, 64),
    "obs_own_missiles": count(1, 64),
    "obs_history": count(0, 8),
    "obs_trace_s": Bounds(0.0, 3600.0),
}
"""The range of each number of :class:`SimConfig` (a pair's bound holds for both ends), checked
before any other check does arithmetic with it. Counts of physics steps (``max_time_s / dt_s``,
a missile's flight, the cooldown) stay far below the int32 counters that hold them; a missile's
flight (at most an hour) bounds the per-step tables the scripted agents and the reach block
compute in Python."""


@dataclass(frozen=True)
class AeroParams:
    """Parameters of the shared aerodynamic law for one kind of body (fighter or missile)."""

    terminal_speed_mps: float
    """Free-fall terminal speed Vt: zero-lift drag equals g at this speed."""
    min_turn_radius_m: float
    """Rmin: full rudder turns on a circle of this radius at any speed."""
    lift_to_drag: float
    """LD: the best lift-to-drag ratio; sets the induced-drag factor."""
    max_thrust_mps2: float
    """Thrust acceleration at full throttle (fighter) or while the motor burns (missile)."""

    @property
    def cd0(self) -> float:
        """Zero-lift drag factor Cd0 = g / Vt²."""
        return G / self.terminal_speed_mps**2

    @property
    def lift_factor(self) -> float:
        """Lift factor c = 1 / Rmin."""
        return 1.0 / self.min_turn_radius_m

    @property
    def induced_drag_factor(self) -> float:
        """Induced-drag factor k = 1 / (4 · Cd0 · LD²)."""
        return 1.0 / (4.0 * self.cd0 * self.lift_to_drag**2)

    def validate(self, prefix: str) -> None:
        """Raise ``ValueError`` naming ``prefix.field`` for a value outside :data:`AERO_BOUNDS`."""
        check_bounds(self, AERO_BOUNDS, prefix)


AERO_BOUNDS: dict[str, Bounds] = {
    "terminal_speed_mps": Bounds(1.0, 10_000.0),
    "min_turn_radius_m": Bounds(1.0, 1e7),
    "lift_to_drag": Bounds(0.1, 1000.0),
    "max_thrust_mps2": Bounds(0.0, 10_000.0, low_open=True),
}
"""The range of each :class:`AeroParams` field (the same for the fighter and the missile): the
drag factors divide by the terminal speed squared and the turn radius, so neither may be near 0."""


def _fighter_aero() -> AeroParams:
    return AeroParams(400.0, 1000.0, 5.0, 1.5 * G)


def _missile_aero() -> AeroParams:
    return AeroParams(400.0, 1000.0, 2.0, 15.0 * G)


@dataclass(frozen=True)
class SimConfig:
    """Everything that fixes the duel's physics, rules, timing and interface.

    Defaults follow ``sim.md``. Construct with keyword arguments; use :meth:`replace` to derive
    a variant and :meth:`from_dict` to load from a TOML table.
    """

    dt_s: float = 0.1
    """Physics step. Speed-up never enlarges it (see ``time_scale``)."""
    substeps: int = 5
    """Physics steps per decision step at ``time_scale = 1``."""
    time_scale: float = 1.0
    """Sim time per decision relative to the default; adds substeps (``substeps · time_scale``
    must be a whole number, and a decision step covers at most :data:`MAX_DECISION_S`)."""
    max_time_s: float = 300.0
    """Episode time limit: reaching it truncates (a draw, not a termination). At least one
    decision step."""

    missiles_per_fighter: int = 6
    """Missiles carried by each fighter; also the number of missile slots per side."""
    fire_cooldown_s: float = 0.5
    """Minimum time between two launches of one fighter."""
    hit_radius_m: float = 100.0
    """A missile hits when its closest approach during a physics step is under this."""
    missile_burn_time_s: float = 10.0
    """The motor burns while the missile's flight time is under this."""
    missile_min_speed_mps: float = 200.0
    """After burn-out a missile slower than this is lost."""
    missile_max_flight_time_s: float = 90.0
    """A missile whose flight time exceeds this is lost."""
    launch_offset_m: float = 20.0
    """A missile starts this far ahead of its fighter, along the fighter's heading."""
    nav_constant: float = 4.0
    """Proportional-navigation constant N."""
    arena_half_width_m: float = 75_000.0
    """The arena is the square |x|, |y| ≤ this; a fighter outside is destroyed."""

    fighter: AeroParams = field(default_factory=_fighter_aero)
    """Fighter aerodynamics (thrust is throttle × max_thrust)."""
    missile: AeroParams = field(default_factory=_missile_aero)
    """Missile aerodynamics (thrust while the motor burns)."""

    scenario: str = "random"
    """Initial conditions: ``"random"`` (seeded draw per environment) or ``"head_on"``."""
    spawn_separation_m: tuple[float, float] = (25_000.0, 45_000.0)
    """Random scenario: range of the initial separation."""
    spawn_heading_jitter_rad: float = math.radians(30.0)
    """Random scenario: each fighter heads at the other within ± this."""
    spawn_speed_mps: tuple[float, float] = (250.0, 350.0)
    """Random scenario: range of initial speeds."""
    spawn_shift_m: float = 20_000.0
    """Random scenario: the picture's centre is shifted by up to ± this in x and y."""
    spawn_partial_ammo: float = 0.0
    """Random scenario: the chance that a fighter starts an episode with fewer missiles, a
    number drawn uniformly from 0 to ``missiles_per_fighter − 1`` (each side drawn on its own).
    A training curriculum of endgames (an enemy already disarmed, the last missile to place);
    0, the rules' own start, is what every evaluation plays."""
    spawn_wide: float = 0.0
    """Random scenario: the chance that an episode starts anywhere in the arena, its picture's
    centre shifted by up to ± ``wide_shift_m`` (the arena's half width less half the largest
    separation and ``SPAWN_WIDE_MARGIN_M``) instead of ``spawn_shift_m``, so fights begin near
    an edge too. A training curriculum: a fighter that never started near an edge has never
    learned that turning cold there runs it out of the arena. 0, the rules' own start, is what
    every evaluation plays."""
    head_on_separation_m: float = 28_000.0
    """Head-on scenario: separation."""
    head_on_speed_mps: float = 300.0
    """Head-on scenario: both fighters' speed."""

    action_mode: str = "discrete"
    """``"discrete"`` (int64 [N, 2, 3]: rudder {0,1,2} → {−1,0,+1}, throttle {0,1,2} → {0,0.5,1},
    fire {0,1}) or ``"continuous"`` (float [N, 2, 3]: rudder [−1,1], throttle [0,1],
    fire > 0.5 fires; values are clipped to their bounds)."""
    obs_incoming_missiles: int = 4
    """How many of the nearest incoming enemy missiles each observation describes."""
    obs_own_missiles: int = 4
    """How many of the own missiles in flight each observation describes (nearest to target)."""
    obs_reach: bool = False
    """Append the ``reach`` block to the observation: the own missile's reach against the enemy
    flying straight and against it turning away (the no-escape reach), the enemy's reach against
    me turning away, and the escape time margin
    (sim/reach/spacetime.py; sim/layout.py gives the scales). The native CPU kernel looks them
    up itself (sim/native/reach.h): about 0.9 µs per environment and decision on one core."""
    obs_history: int = 0
    """Memory by stacked frames: append the observations of this many past decision steps
    (``past[1]`` one decision ago, ``past[2]`` two, ...) to the current one, so a feed-forward
    network sees how the fight moves (the enemy's turn, a missile closing) and how the enemy
    has flown. At an episode's start every past frame is the first observation. The simulator
    keeps the frames (sim/batched.py); every agent, the learner and the exports see the longer
    vector, and a checkpoint trained without them still flies on the current frame."""
    obs_trace_s: float = 0.0
    """Memory by a trace: with a time constant ``τ > 0`` seconds, append an exponential moving
    average of the frames so far (``trace.*`` in the layout, after any past frames), each
    decision ``m ← a·m + (1 − a)·frame`` with ``a = exp(−decision_dt_s / τ)``, starting from the
    episode's first frame. Where stacked frames show the last seconds, a trace of tens of
    seconds summarises how this enemy has flown: whether it points at me, turns away after its
    shots, how far out its missiles came. 0 (the default) keeps none; a checkpoint trained
    without it still flies on the current frame, one trained with it needs the same τ."""

    dtype: str = "float32"
    """Floating-point type of the state: ``"float32"`` or ``"float64"``."""
    check_actions: bool = True
    """Validate actions (NaN, out-of-range indices). On CUDA the check is a device-side flag
    read at chunk boundaries, never a per-step host sync."""

    def __post_init__(self) -> None:
        check_bounds(self, SIM_BOUNDS)
        total = self.substeps * self.time_scale
        if abs(total - round(total)) > 1e-9 or round(total) < 1:
            raise ValueError(
                f"time_scale must make substeps * time_scale a whole number >= 1, "
                f"got substeps={self.substeps}, time_scale={self.time_scale}"
            )
        decision_s = self.dt_s * total
        if decision_s > MAX_DECISION_S + 1e-9:
            raise ValueError(
                f"a decision step of {decision_s:g} s of sim time (dt_s={self.dt_s} x "
                f"substeps={self.substeps} x time_scale={self.time_scale}) is longer than the "
                f"{MAX_DECISION_S:g} s allowed: lower time_scale (at most "
                f"{MAX_DECISION_S / (self.dt_s * self.substeps):g} here), substeps or dt_s"
            )
        if decision_s > self.max_time_s + 1e-9:
            raise ValueError(
                f"max_time_s={self.max_time_s} is shorter than one decision step ({decision_s:g} s "
                "= dt_s x substeps x time_scale): an episode must last at least one decision"
            )
        for name in ("spawn_separation_m", "spawn_speed_mps"):
            lo_hi = getattr(self, name)
            if not isinstance(lo_hi, (tuple, list)) or len(lo_hi) != 2 or not lo_hi[0] <= lo_hi[1]:
                raise ValueError(f"{name} must be a pair (low, high) with 0 < low <= high, got {lo_hi!r}")
        if self.spawn_separation_m[1] / 2 + self.spawn_shift_m >= self.arena_half_width_m:
            raise ValueError(
                "spawn_separation_m and spawn_shift_m must place fighters inside the arena "
                f"(max separation / 2 + shift = {self.spawn_separation_m[1] / 2 + self.spawn_shift_m} "
                f">= arena_half_width_m = {self.arena_half_width_m})"
            )
        if self.spawn_wide > 0 and self.wide_shift_m <= self.spawn_shift_m:
            raise ValueError(
                f"spawn_wide={self.spawn_wide} needs room beyond spawn_shift_m: the arena's half width "
                f"less half the largest separation and {SPAWN_WIDE_MARGIN_M:g} m is {self.wide_shift_m:g} m, "
                f"not more than spawn_shift_m = {self.spawn_shift_m:g}"
            )
        for name in ("obs_reach", "check_actions"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.scenario not in ("random", "head_on"):
            raise ValueError(f"scenario must be 'random' or 'head_on', got {self.scenario!r}")
        if self.action_mode not in ("discrete", "continuous"):
            raise ValueError(f"action_mode must be 'discrete' or 'continuous', got {self.action_mode!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if self.obs_incoming_missiles > self.missiles_per_fighter:
            raise ValueError(
                f"obs_incoming_missiles must be <= missiles_per_fighter ({self.missiles_per_fighter}), "
                f"got {self.obs_incoming_missiles}"
            )
        if self.obs_own_missiles > self.missiles_per_fighter:
            raise ValueError(
                f"obs_own_missiles must be <= missiles_per_fighter ({self.missiles_per_fighter}), "
                f"got {self.obs_own_missiles}"
            )
        if not isinstance(self.fighter, AeroParams) or not isinstance(self.missile, AeroParams):
            raise ValueError("fighter and missile must be AeroParams")
        self.fighter.validate("fighter")
        self.missile.validate("missile")

    def rules_start(self) -> SimConfig:
        """This sim with the rules' own start (no training curriculum: ``spawn_partial_ammo``
        and ``spawn_wide`` 0): the sim every evaluation plays, whatever a policy was trained on."""
        return dataclasses.replace(self, spawn_partial_ammo=0.0, spawn_wide=0.0)

    @property
    def wide_shift_m(self) -> float:
        """How far a ``spawn_wide`` start's centre may be shifted in x and in y."""
        return self.arena_half_width_m - self.spawn_separation_m[1] / 2 - SPAWN_WIDE_MARGIN_M

    @property
    def physics_steps_per_decision(self) -> int:
        """Physics steps in one decision step: ``substeps · time_scale``."""
        return round(self.substeps * self.time_scale)

    @property
    def decision_dt_s(self) -> float:
        """Sim time covered by one decision step."""
        return self.dt_s * self.physics_steps_per_decision

    @property
    def max_decisions(self) -> int:
        """Decision steps in a full-length episode."""
        return math.ceil(self.max_time_s / self.decision_dt_s - 1e-9)

    # Time thresholds as whole physics steps, so float round-off never moves an event.
    @property
    def cooldown_steps(self) -> int:
        """A fighter may launch when its steps since last launch reach this."""
        return max(math.ceil(self.fire_cooldown_s / self.dt_s - 1e-6), 0)

    @property
    def burn_steps(self) -> int:
        """The motor burns while a missile's flight steps are under this."""
        return math.ceil(self.missile_burn_time_s / self.dt_s - 1e-6)

    @property
    def max_flight_steps(self) -> int:
        """A missile whose flight steps exceed this is lost."""
        return math.floor(self.missile_max_flight_time_s / self.dt_s + 1e-6)

    @property
    def time_limit_steps(self) -> int:
        """An episode is truncated at the end of the decision step where its physics steps
        reach this."""
        return math.ceil(self.max_time_s / self.dt_s - 1e-6)

    def replace(self, **changes: Any) -> SimConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (for TOML, JSON and checkpoints)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> SimConfig:
        """Build from a plain dict (``core.coerce.coerce``: every value checked against its
        field's type, a partial ``fighter`` or ``missile`` table completed from that field's
        default); unknown keys raise ``ValueError`` naming them."""
        return coerce(cls, data, unknown="unknown sim config field(s): {names}")
