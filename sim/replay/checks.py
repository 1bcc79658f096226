"""What a replay must hold, checked as it is read (:class:`sim.replay.format.ReplayReader`).

Every object of the file is checked against the format before anything uses it, so a damaged
or hostile file is refused with one :class:`sim.replay.format.ReplayError` naming the file, the part
(``header``, ``block 3`` counted from 1 in file order, ``end record``) and what is wrong:

- the **header**: ``sim_config`` a mapping that :class:`sim.config.SimConfig` accepts (fields of
  a newer writer left out), ``agents`` a mapping with ``red`` and ``blue`` strings,
  ``missiles_per_fighter`` the config's, at most :data:`MAX_MISSILE_SLOTS`, ``decision_dt_s``
  the config's (finite, > 0), ``fields`` the frame arrays' dtypes and shapes; ``seed``,
  ``scenario``, ``env_index``, ``episode``, ``created_utc``, ``agent_side``, ``opponent`` of
  their types when present;
- every **block**: a whole number of frames, each array of its dtype and length; every float
  finite, positions within :data:`POSITION_LIMIT_M`, times not going back, flags 0 or 1, missile
  numbers ``-1`` or below ``2·M`` (a fighter carries ``M`` missiles), ammunition within
  ``0..M``, targets 0 or 1; the frames of the whole replay at most one per decision of the
  config's episode (plus the start) and at most :data:`MAX_FRAME_BYTES`;
- every **event**: a mapping with a known ``kind``, a finite ``t_s``, a ``frame`` inside its
  block and the fields of its kind (:data:`EVENT_FIELDS`); at most :func:`max_events` in all
  (each launch gives at most a launch, a hit and a loss);
- the **end record**: the frame count, and an ``outcome`` with ``winner`` (``red``, ``blue``,
  ``draw``), ``end_reason`` (:data:`sim.kernels.END_REASONS`), a finite ``t_s`` and
  ``decisions``.

Non-finite numbers are refused, never drawn: no picture of a fight has a fighter at infinity.
A newer minor version may add header keys, arrays, record types and event kinds; they are
ignored (unknown event kinds are dropped).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, TypeGuard

import numpy as np

from sim.config import SimConfig
from sim.kernels import END_REASONS

MAX_MISSILE_SLOTS = 256
"""The most missile slots per side a reader accepts (the recorded configs carry a few)."""
MAX_FRAME_BYTES = 256 << 20
"""The most bytes the frame arrays of one replay may take in memory."""
MAX_OBJECT_BYTES = 64 << 20
"""The largest msgpack object (one block) a reader reads or a writer writes."""
POSITION_LIMIT_M = 1e8
"""The largest position coordinate accepted, m (the arena is some 100 km wide)."""

WINNER_NAMES = ("red", "blue", "draw")
LOST_REASONS = ("hit", "target_gone", "too_slow", "max_flight_time", "replaced")
SIDE, SLOT, MISSILE = "side", "slot", "missile"
EVENT_FIELDS: dict[str, dict[str, str | tuple[str, ...]]] = {
    "launch": {"side": SIDE, "slot": SLOT, "missile": MISSILE},
    "missile_lost": {"side": SIDE, "slot": SLOT, "missile": MISSILE, "reason": LOST_REASONS},
    "hit": {"side": SIDE, "missile": MISSILE, "target": SIDE},
    "kill": {"side": SIDE, "by": SIDE},
    "out_of_arena": {"side": SIDE},
    "time_limit": {},
    "ammo_out": {},
    "end": {"winner": WINNER_NAMES, "end_reason": END_REASONS},
}
"""Each event kind's fields: a side (0 or 1), a slot (``0..M-1``), a missile number
(``0..2M-1``) or one of the listed names."""

OPTIONAL_HEADER_TYPES: dict[str, tuple[type, ...]] = {
    "seed": (int, type(None)), "scenario": (str,), "env_index": (int,), "episode": (int,),
    "created_utc": (str,), "agent_side": (int,), "opponent": (str,),
}
"""Header keys a writer may leave out, and the types they have when present."""


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def header_config(header: Mapping[str, Any]) -> SimConfig:
    """The header's sim config (``ValueError`` saying what is wrong); fields a newer writer
    added are left out."""
    raw = header.get("sim_config")
    if not isinstance(raw, Mapping):
        raise ValueError(f"sim_config must be a mapping of config fields, got {_shown(raw)}")
    known = {f.name for f in dataclasses.fields(SimConfig)}
    try:
        return SimConfig.from_dict({k: v for k, v in raw.items() if k in known})
    except (ValueError, TypeError) as exc:
        raise ValueError(f"sim_config: {exc}") from None


def check_header(header: dict[str, Any], shapes: Mapping[str, tuple[str, tuple[int, ...]]] | None = None) -> SimConfig:
    """Check a header past its format and version (``ValueError`` saying what is wrong);
    returns its sim config. ``shapes`` are the frame arrays it must declare in ``fields``."""
    config = header_config(header)
    m = header.get("missiles_per_fighter")
    if not _is_int(m) or not 1 <= m <= MAX_MISSILE_SLOTS:
        raise ValueError(f"missiles_per_fighter must be an integer in 1..{MAX_MISSILE_SLOTS}, got {_shown(m)}")
    if m != config.missiles_per_fighter:
        raise ValueError(f"missiles_per_fighter {m} differs from sim_config's {config.missiles_per_fighter}")
    dt = header.get("decision_dt_s")
    if not _is_number(dt) or dt <= 0:
        raise ValueError(f"decision_dt_s must be a finite number > 0, got {_shown(dt)}")
    if not math.isclose(dt, config.decision_dt_s, rel_tol=1e-6):
        raise ValueError(f"decision_dt_s {dt:g} differs from sim_config's {config.decision_dt_s:g}")
    agents = header.get("agents")
    if not (isinstance(agents, Mapping) and all(isinstance(agents.get(s), str) for s in ("red", "blue"))):
        raise ValueError(f"agents must be a mapping with red and blue names, got {_shown(agents)}")
    for key, types in OPTIONAL_HEADER_TYPES.items():
        value = header.get(key)
        if key in header and (not isinstance(value, types) or isinstance(value, bool)):
            raise ValueError(f"{key} must be {' or '.join(_type_name(t) for t in types)}, got {_shown(value)}")
    for key, high in (("env_index", None), ("episode", None), ("agent_side", 1)):
        value = header.get(key)
        if _is_int(value) and (value < 0 or (high is not None and value > high)):
            raise ValueError(f"{key} must be {'0 or 1' if high else 'an integer >= 0'}, got {value}")
    fields = header.get("fields")
    if not isinstance(fields, Mapping):
        raise ValueError(f"fields must be a mapping of frame arrays, got {_shown(fields)}")
    for name, (dtype, shape) in (shapes or {}).items():
        if fields.get(name) != [dtype, list(shape)]:
            raise ValueError(f"fields: {name} must be [{dtype!r}, {list(shape)}], got {_shown(fields.get(name))}")
    return config


def _type_name(t: type) -> str:
    return {int: "an integer", str: "a string", type(None): "null"}.get(t, t.__name__)


def _shown(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def max_frames(config: SimConfig) -> int:
    """The most frames a replay of ``config`` holds: the start and one per decision."""
    return config.max_decisions + 2


def max_events(m: int) -> int:
    """The most events of one fight of ``m`` missiles a side: per launch, the launch, a hit and
    the loss; two kills, two exits from the arena, the time limit, ammunition out and the end."""
    return 6 * m + 7


def check_arrays(arrays: Mapping[str, np.ndarray], m: int, last_t_s: float) -> None:
    """Check the values of one block's frame arrays (``ValueError`` naming the array)."""
    for name, a in arrays.items():
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise ValueError(f"{name} holds non-finite values (NaN or infinity)")
    for name in ("f_x", "f_y", "m_x", "m_y"):
        if (np.abs(arrays[name]) > POSITION_LIMIT_M).any():
            raise ValueError(f"{name} holds positions beyond {POSITION_LIMIT_M:g} m")
    t = arrays["t_s"]
    if t.size and (float(t[0]) < max(last_t_s, 0.0) or (np.diff(t) < 0).any()):
        raise ValueError("t_s goes back in time (sim times must not decrease)")
    for name in ("f_alive", "m_active"):
        if (arrays[name].view(np.uint8) > 1).any():
            raise ValueError(f"{name} holds flags other than 0 and 1")
    ranges = (("m_id", -1, 2 * m - 1), ("f_ammo", 0, m), ("m_target", 0, 1), ("decision", 0, 2**31 - 1))
    for name, low, high in ranges:
        a = arrays[name]
        if a.size and (int(a.min()) < low or int(a.max()) > high):
            raise ValueError(f"{name} must lie in {low}..{high}, holds {int(a.min())}..{int(a.max())}")


def check_event(event: object, m: int, first: int, count: int) -> bool:
    """Check one event of a block holding frames ``first .. first + count - 1``
    (``ValueError`` saying what is wrong); False for an unknown kind (of a newer writer)."""
    if not isinstance(event, dict):
        raise ValueError(f"an event must be a mapping, got {_shown(event)}")
    kind = event.get("kind")
    if not isinstance(kind, str):
        raise ValueError(f"an event has no kind: {_shown(event)}")
    if kind not in EVENT_FIELDS:
        return False
    t = event.get("t_s")
    if not _is_number(t) or t < 0:
        raise ValueError(f"{kind} event: t_s must be a finite number >= 0, got {_shown(t)}")
    frame = event.get("frame")
    if not _is_int(frame) or not first <= frame < first + count:
        raise ValueError(f"{kind} event: frame must be one of the block's frames "
                         f"({first}..{first + count - 1}), got {_shown(frame)}")
    bounds = {SIDE: 2, SLOT: m, MISSILE: 2 * m}
    for name, allowed in EVENT_FIELDS[kind].items():
        value = event.get(name)
        if isinstance(allowed, tuple):
            if value not in allowed:
                raise ValueError(f"{kind} event: {name} must be one of {', '.join(allowed)}, got {_shown(value)}")
        elif not _is_int(value) or not 0 <= value < bounds[allowed]:
            raise ValueError(f"{kind} event: {name} must be an integer in 0..{bounds[allowed] - 1}, "
                             f"got {_shown(value)}")
    return True


def check_end(obj: Mapping[str, Any], frames: int) -> dict[str, Any]:
    """Check the end record of a replay of ``frames`` frames; returns its outcome."""
    if obj.get("frames") != frames or not _is_int(obj.get("frames")):
        raise ValueError(f"it counts {_shown(obj.get('frames'))} frames, the file holds {frames}")
    outcome = obj.get("outcome")
    if not isinstance(outcome, dict):
        raise ValueError(f"outcome must be a mapping, got {_shown(outcome)}")
    if outcome.get("winner") not in WINNER_NAMES:
        raise ValueError(f"outcome: winner must be one of {', '.join(WINNER_NAMES)}, got {_shown(outcome.get('winner'))}")
    if outcome.get("end_reason") not in END_REASONS:
        raise ValueError(f"outcome: end_reason must be one of {', '.join(END_REASONS)}, "
                         f"got {_shown(outcome.get('end_reason'))}")
    if not _is_number(outcome.get("t_s")):
        raise ValueError(f"outcome: t_s must be a finite number, got {_shown(outcome.get('t_s'))}")
    if not _is_int(outcome.get("decisions")) or outcome["decisions"] < 0:
        raise ValueError(f"outcome: decisions must be an integer >= 0, got {_shown(outcome.get('decisions'))}")
    return dict(outcome)
