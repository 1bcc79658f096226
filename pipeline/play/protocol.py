"""The page's messages to the server, checked before anything acts on them.

Every message is one JSON object over the WebSocket at ``/ws`` (docs/play.md lists them all):

- ``{"type": "input", "seat": "red"|"blue", "rudder": -1|0|1, "throttle": 0|0.5|1, "fire": bool,
  "seq": int}``: a person's controls (``seq``, optional, is echoed in every state);
- ``{"type": "control", "action": "pause"|"resume"|"restart"|"time_scale", "value": number}``
  (``value`` only for ``time_scale``, within :data:`TIME_SCALES`);
- ``{"type": "take_seat", "seat": "red"|"blue"|"auto"|"none"}``: fly a seat (``auto``: every
  free seat a person flies; ``none``: give the held seats back);
- ``{"type": "choose", "red": SPEC, "blue": SPEC, "scenario": NAME}``: a new fight.

:func:`parse_message` turns the text into a :class:`Message` or raises :class:`ProtocolError`,
whose text is the one line the page shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from core.command import squeezed

MAX_MESSAGE_BYTES = 4096
"""The longest message the page may send; a longer one is refused, unread."""

TIME_SCALES = (0.125, 8.0)
"""The slowest and fastest time scale (sim seconds per wall second)."""

SPEC_MAX_CHARS = 1024
"""The longest agent spec a ``choose`` message may carry."""

_FIELDS: dict[str, tuple[str, ...]] = {
    "input": ("type", "seat", "rudder", "throttle", "fire", "seq"),
    "control": ("type", "action", "value"),
    "take_seat": ("type", "seat"),
    "choose": ("type", "red", "blue", "scenario"),
}
CONTROL_ACTIONS = ("pause", "resume", "restart", "time_scale")
SEAT_CHOICES = ("red", "blue", "auto", "none")


class ProtocolError(ValueError):
    """A message the server does not take; the text is one line saying what is wrong and what
    is allowed."""


@dataclass(frozen=True)
class Message:
    """A checked message: its ``type`` and its fields."""

    type: str
    fields: dict[str, Any]


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _one_of(msg: dict[str, Any], key: str, allowed: tuple[Any, ...], what: str) -> Any:
    value = msg.get(key)
    if (not _number(value) and not isinstance(value, str)) or value not in allowed:
        raise ProtocolError(f"{what} {key!r} must be one of {', '.join(map(json.dumps, allowed))}, got {json.dumps(value)}")
    return value


def parse_message(text: str | bytes) -> Message:
    """The message in ``text``, checked; :class:`ProtocolError` for anything else."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {size} bytes refused: at most {MAX_MESSAGE_BYTES} bytes")
    try:
        msg = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"message is not JSON ({squeezed(exc)})") from None
    if not isinstance(msg, dict):
        raise ProtocolError(f"message must be a JSON object, got {type(msg).__name__}")
    kind = msg.get("type")
    if kind not in _FIELDS:
        raise ProtocolError(f"unknown message type {json.dumps(kind)}: expected one of {', '.join(_FIELDS)}")
    unknown = sorted(set(msg) - set(_FIELDS[kind]))
    if unknown:
        raise ProtocolError(f"{kind} message: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(_FIELDS[kind])}")
    return Message(kind, _CHECKS[kind](msg))


def _input(msg: dict[str, Any]) -> dict[str, Any]:
    seat = _one_of(msg, "seat", ("red", "blue"), "input")
    rudder = _one_of(msg, "rudder", (-1, 0, 1), "input")
    throttle = _one_of(msg, "throttle", (0, 0.5, 1), "input")
    fire = msg.get("fire")
    if not isinstance(fire, bool):
        raise ProtocolError(f"input 'fire' must be true or false, got {json.dumps(fire)}")
    seq = msg.get("seq", 0)
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**53:
        raise ProtocolError(f"input 'seq' must be an integer in 0..2^53, got {json.dumps(seq)}")
    return {"seat": seat, "rudder": float(rudder), "throttle": float(throttle), "fire": fire, "seq": seq}


def _control(msg: dict[str, Any]) -> dict[str, Any]:
    action = _one_of(msg, "action", CONTROL_ACTIONS, "control")
    if action != "time_scale":
        return {"action": action}
    value = msg.get("value")
    lo, hi = TIME_SCALES
    if not isinstance(value, int | float) or isinstance(value, bool) or not lo <= value <= hi:
        raise ProtocolError(f"control time_scale 'value' must be a number in {lo}..{hi}, got {json.dumps(value)}")
    return {"action": action, "value": float(value)}


def _take_seat(msg: dict[str, Any]) -> dict[str, Any]:
    return {"seat": _one_of(msg, "seat", SEAT_CHOICES, "take_seat")}


def _choose(msg: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key in ("red", "blue", "scenario"):
        value = msg.get(key)
        if not isinstance(value, str) or not value.strip() or len(value) > SPEC_MAX_CHARS:
            raise ProtocolError(f"choose {key!r} must be a non-empty string of at most {SPEC_MAX_CHARS} "
                                f"characters, got {json.dumps(value)[:80]}")
        out[key] = value.strip()
    return out


_CHECKS = {"input": _input, "control": _control, "take_seat": _take_seat, "choose": _choose}


# ---------------------------------------------------------------- replays (pipeline/play/replays.py)
# {"type": "seek", "replay": NAME, "t": SECONDS, "seat": "red"|"blue"}: the moment ``t`` of the
# open replay NAME (from its replay_info message), seen from ``seat``; answered by a state message.

REPLAY_NAME_MAX_CHARS = 64
"""The longest replay name a ``seek`` message may carry (names are 16 hex digits)."""

_FIELDS["seek"] = ("type", "replay", "t", "seat")


def _seek(msg: dict[str, Any]) -> dict[str, Any]:
    name = msg.get("replay")
    if not isinstance(name, str) or not 0 < len(name) <= REPLAY_NAME_MAX_CHARS:
        raise ProtocolError(f"seek 'replay' must be the name of an open replay (from replay_info), got "
                            f"{json.dumps(name)[:80]}")
    t = msg.get("t")
    if not isinstance(t, int | float) or isinstance(t, bool) or not abs(t) < 1e9:
        raise ProtocolError(f"seek 't' must be a number of seconds, got {json.dumps(t)[:80]}")
    seat = _one_of(msg, "seat", ("red", "blue"), "seek")
    return {"replay": name, "t": float(t), "seat": seat}


_CHECKS["seek"] = _seek
