"""The observation layout, written down once.

Observations are egocentric and identical in form for both sides. The *body frame* of a fighter
has its x axis along the fighter's velocity (``n = v / |v|``) and its y axis to the left
(``n⊥ = (−n_y, n_x)``); a world vector ``d`` has body coordinates ``(d·n, d·n⊥)``. Angles are
given as cosine and sine so nothing wraps. Every field is scaled to about [−1, 1] by the scale
named below, and the whole vector is finally clamped to ``[−OBS_CLIP, OBS_CLIP]``. Divisor
norms (speeds, ranges) are clamped to at least ``NORM_EPS``.

Blocks, in order (``o`` the observing fighter, ``e`` the enemy fighter):

``own`` (10): x / arena_half_width, y / arena_half_width, heading cos, heading sin (world
frame), speed / SPEED_SCALE, missiles left / missiles_per_fighter, fire readiness
``min(steps_since_launch / cooldown_steps, 1)``, alive flag, throttle, rudder.

``enemy`` (10), with ``r = p_e − p_o``: alive flag, |r| / RANGE_SCALE, bearing cos and sin
(``r`` in o's body frame, divided by |r|), relative heading cos and sin (``n_e`` in o's body
frame), enemy speed / SPEED_SCALE, closing speed ``−r·(v_e − v_o) / |r|`` / CLOSING_SCALE,
enemy missiles left / missiles_per_fighter, enemy nose-on cosine ``−r·n_e / |r|`` (1 when the
enemy points straight at o).

``incoming`` (9 × obs_incoming_missiles): the enemy's active missiles, nearest to o first
(ties by slot index), absent entries all zero. With ``d = p_o − p_m``: present flag,
|d| / RANGE_SCALE, bearing cos and sin (``−d`` in o's body frame, divided by |d|), missile
heading cos and sin (``n_m`` in o's body frame), missile speed / MISSILE_SPEED_SCALE, closing
speed ``−d·(v_o − v_m) / |d|`` / CLOSING_SCALE, motor burning flag.

``own_missiles`` (6 × obs_own_missiles): o's active missiles, nearest to the enemy first (ties by
slot index), absent entries all zero. With ``q = p_e − p_m``: present flag, |q| / RANGE_SCALE,
missile speed / MISSILE_SPEED_SCALE, closing speed ``−q·(v_e − v_m) / |q|`` / CLOSING_SCALE,
flight time / missile_max_flight_time_s, motor burning flag.

``time`` (1): fraction of episode time left, ``max(1 − t / max_time_s, 0)``.

``reach`` (4, only with ``SimConfig.obs_reach``; sim/reach/spacetime.py): the reach of an own missile
launched now against the enemy flying straight / RANGE_SCALE, the same against the enemy turning
away (the no-escape reach) / RANGE_SCALE, the reach of an enemy missile launched now against o
turning away / RANGE_SCALE, and o's escape time margin /
MARGIN_SCALE_S (positive: seconds until an enemy launch can no longer be outrun by turning
away, both flying straight on; negative: seconds since).

Memory (``SimConfig.obs_history``, ``SimConfig.obs_trace_s``): the frame above, then the past
frames ``past[1]``, ..., ``past[k]`` (the same components one, ..., k decisions ago), then the
``trace`` (an exponential moving average of the frames so far, same components and scales).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sim.config import SimConfig

RANGE_SCALE_M = 50_000.0
SPEED_SCALE_MPS = 500.0
MISSILE_SPEED_SCALE_MPS = 1_000.0
CLOSING_SCALE_MPS = 1_000.0
MARGIN_SCALE_S = 60.0
OBS_CLIP = 10.0
NORM_EPS = 1e-6

OWN_FIELDS = (
    "x", "y", "heading_cos", "heading_sin", "speed", "missiles_left", "fire_ready", "alive",
    "throttle", "rudder",
)
ENEMY_FIELDS = (
    "alive", "range", "bearing_cos", "bearing_sin", "rel_heading_cos", "rel_heading_sin",
    "speed", "closing_speed", "missiles_left", "nose_on_cos",
)
INCOMING_FIELDS = (
    "present", "range", "bearing_cos", "bearing_sin", "heading_cos", "heading_sin", "speed",
    "closing_speed", "motor_on",
)
OWN_MISSILE_FIELDS = ("present", "range_to_target", "speed", "closing_speed", "flight_time", "motor_on")
TIME_FIELDS = ("time_left",)
REACH_FIELDS = ("own_reach", "own_escape_reach", "enemy_escape_reach", "escape_margin")


@dataclass(frozen=True)
class ObsLayout:
    """Names and offsets of every observation component for one configuration."""

    incoming: int
    own_missiles: int
    reach: bool = False
    """Whether the ``reach`` block is appended (``SimConfig.obs_reach``)."""
    history: int = 0
    """How many past frames follow the current one (``SimConfig.obs_history``)."""
    trace_s: float = 0.0
    """The time constant of the trace that follows them, 0 for none (``SimConfig.obs_trace_s``)."""

    @classmethod
    def from_config(cls, config: SimConfig) -> ObsLayout:
        return cls(config.obs_incoming_missiles, config.obs_own_missiles, config.obs_reach,
                   config.obs_history, float(config.obs_trace_s))

    @property
    def frames(self) -> int:
        """How many frame-sized blocks the whole vector holds: the current frame, the past
        frames and the trace."""
        return 1 + self.history + (1 if self.trace_s > 0 else 0)

    @functools.cached_property
    def frame_names(self) -> tuple[str, ...]:
        """The names of one frame: every component of the current observation."""
        out = [f"own.{f}" for f in OWN_FIELDS]
        out += [f"enemy.{f}" for f in ENEMY_FIELDS]
        out += [f"incoming[{i}].{f}" for i in range(self.incoming) for f in INCOMING_FIELDS]
        out += [f"own_missile[{i}].{f}" for i in range(self.own_missiles) for f in OWN_MISSILE_FIELDS]
        out += [f"time.{f}" for f in TIME_FIELDS]
        if self.reach:
            out += [f"reach.{f}" for f in REACH_FIELDS]
        return tuple(out)

    @property
    def frame_size(self) -> int:
        """Components in one frame; the whole vector holds :attr:`frames` of them."""
        return len(self.frame_names)

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        """Every component's name, in order (``block.field`` or ``block[i].field``, then the
        past frames' ``past[j].block.field``, then the trace's ``trace.block.field``)."""
        frame = self.frame_names
        past = tuple(f"past[{j}].{name}" for j in range(1, self.history + 1) for name in frame)
        trace = tuple(f"trace.{name}" for name in frame) if self.trace_s > 0 else ()
        return frame + past + trace

    @property
    def size(self) -> int:
        return len(self.names)

    @functools.cached_property
    def mirror_signs(self) -> tuple[float, ...]:
        """Each component's sign under the arena's mirror image (the world's y → −y, a symmetry
        of the square arena and of every rule): −1 for what changes side, the world y and
        heading sine, the rudder and every body-frame sine (the body frame's y axis points
        left), +1 for the rest. The mirrored fight of a fight observes ``obs * signs``."""
        flips = {"own.y", "own.rudder"}
        frame = tuple(-1.0 if name in flips or name.endswith("_sin") else 1.0 for name in self.frame_names)
        return frame * self.frames

    @functools.cached_property
    def _offsets(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    def index(self, name: str) -> int:
        """Offset of one named component, e.g. ``layout.index("enemy.bearing_sin")``."""
        try:
            return self._offsets[name]
        except KeyError:
            raise KeyError(f"no observation component named {name!r}") from None

    # Block offsets (start index of each block).
    @property
    def own_start(self) -> int:
        return 0

    @property
    def enemy_start(self) -> int:
        return len(OWN_FIELDS)

    @property
    def incoming_start(self) -> int:
        return self.enemy_start + len(ENEMY_FIELDS)

    @property
    def own_missiles_start(self) -> int:
        return self.incoming_start + self.incoming * len(INCOMING_FIELDS)

    @property
    def time_start(self) -> int:
        return self.own_missiles_start + self.own_missiles * len(OWN_MISSILE_FIELDS)

    @property
    def reach_start(self) -> int:
        """Start of the ``reach`` block (equal to ``size`` when it is off)."""
        return self.time_start + len(TIME_FIELDS)

    def metadata(self) -> dict[str, Any]:
        """A plain description saved with checkpoints; two layouts are compatible iff equal."""
        scales: dict[str, float] = {
            "range_m": RANGE_SCALE_M,
            "speed_mps": SPEED_SCALE_MPS,
            "missile_speed_mps": MISSILE_SPEED_SCALE_MPS,
            "closing_mps": CLOSING_SCALE_MPS,
            "clip": OBS_CLIP,
        }
        if self.reach:
            scales["margin_s"] = MARGIN_SCALE_S
        if self.trace_s > 0:
            scales["trace_s"] = float(self.trace_s)
        return {"version": 1, "size": self.size, "names": list(self.names), "scales": scales}

    @staticmethod
    def frames_prefix(saved: dict[str, Any], current: dict[str, Any]) -> int | None:
        """How many leading components of ``current``'s observation a network saved with
        ``saved``'s layout reads, when the two differ only by memory or the reach block:
        ``saved`` names the first components of ``current`` (a network trained without memory
        in a sim with past frames or a trace, or with fewer frames; one trained without the
        reach block in a sim with it, which then reads the frame before the block) under the
        same scales. None when they differ otherwise (a network trained with a trace needs one
        of the same time constant; one trained with the reach block, a sim with it)."""
        s_names, c_names = list(saved.get("names", [])), list(current.get("names", []))
        s_scales, c_scales = dict(saved.get("scales") or {}), dict(current.get("scales") or {})
        for extra in ("trace_s", "margin_s"):  # the trace's time constant, the reach block's margin
            if extra not in s_scales:
                c_scales.pop(extra, None)  # mean nothing to a network without them
        if (saved.get("version") != current.get("version") or s_scales != c_scales
                or not s_names or len(s_names) >= len(c_names) or c_names[: len(s_names)] != s_names
                or not all(name.startswith(("past[", "trace.", "reach.")) for name in c_names[len(s_names):])):
            return None
        return len(s_names)

    @staticmethod
    def reads(saved: dict[str, Any], current: dict[str, Any]) -> int | None:
        """How many leading components of ``current``'s observation a network saved with
        ``saved``'s layout reads: all of them when the two are equal, the prefix of
        :meth:`frames_prefix` when they differ only by memory or the reach block, else None."""
        if ObsLayout.describe_difference(saved, current) is None:
            return len(current.get("names", []))
        return ObsLayout.frames_prefix(saved, current)

    @staticmethod
    def describe_difference(saved: dict[str, Any], current: dict[str, Any]) -> str | None:
        """A human sentence saying how two layout metadata dicts differ, or None if equal."""
        if saved == current:
            return None
        parts = []
        if saved.get("version") != current.get("version"):
            parts.append(f"layout version {saved.get('version')} != {current.get('version')}")
        if saved.get("size") != current.get("size"):
            parts.append(f"size {saved.get('size')} != {current.get('size')}")
        s_names, c_names = list(saved.get("names", [])), list(current.get("names", []))
        missing = [n for n in s_names if n not in c_names]
        extra = [n for n in c_names if n not in s_names]
        if missing:
            parts.append(f"missing now: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        if extra:
            parts.append(f"new now: {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}")
        if not missing and not extra and s_names != c_names:
            first = next(i for i, (a, b) in enumerate(zip(s_names, c_names, strict=False)) if a != b)
            parts.append(f"order differs from index {first} ({s_names[first]} vs {c_names[first]})")
        if saved.get("scales") != current.get("scales"):
            parts.append(f"scales {saved.get('scales')} != {current.get('scales')}")
        return "; ".join(parts) or "metadata differs"
