"""``python -m pipeline.replay FILE --acmi OUT``: the fight as Tacview's text ACMI 2.2.

What is written (https://www.tacview.net/documentation/acmi/en/): the two header lines
(``FileType=text/acmi/tacview``, ``FileVersion=2.2``); global properties on object ``0``
(``ReferenceTime``, ``ReferenceLongitude``, ``ReferenceLatitude``, ``Title``, ``DataSource``,
``Author``, ``Comments``); then for each frame a time line ``#t`` and one line per object with
``T=lon|lat|alt|roll|pitch|yaw``, where longitude and latitude are offsets from the reference
point. The fighters are ``Type=Air+FixedWing`` (ids ``101`` red, ``102`` blue), each missile
``Type=Weapon+Missile`` with its ``Parent`` (ids ``1000`` + its number, in hex as ACMI ids
are); their ``Name``, ``Color``, ``Coalition`` and ``Pilot`` are given on first appearance. A
missile or fighter that is gone is removed with a ``-id`` line. Events: ``Destroyed`` (a
fighter killed, a missile that hit), ``LeftArea`` (a fighter that left the arena),
``Timeout`` (a missile spent, past its flight time, or whose target was gone), ``Message`` (a
launch) and a ``Bookmark`` with the outcome.

The flat sim plane maps onto the sphere near the reference point: ``lat = y / R``,
``lon = x / (R·cos lat0)`` (radians, R the Earth's mean radius), so positions 75 km from the
centre are placed within a few metres. Heading ``yaw`` is degrees clockwise from north; the
roll is the bank of a coordinated turn with the sim's lateral acceleration
(``atan(V²·c·δ / g)``, positive to the right); the altitude is fixed (the model is 2-D).
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import IO

import numpy as np

from core.files import atomic_write
from sim.config import G
from sim.replay.format import Replay

EARTH_RADIUS_M = 6_371_000.0
REFERENCE_LONGITUDE = 5.0
REFERENCE_LATITUDE = 42.0
ALTITUDE_M = 9_000.0
FIGHTER_IDS = ("101", "102")
COLORS = ("Red", "Blue")
COALITIONS = ("Red", "Blue")
MISSILE_ID_BASE = 0x1000


def missile_id(number: int) -> str:
    """The ACMI object id of missile ``number`` (hex)."""
    return f"{MISSILE_ID_BASE + number:x}"


def to_lon_lat(x_m: float, y_m: float) -> tuple[float, float]:
    """Offsets (degrees) from the reference point of the plane point ``(x, y)``."""
    lat = math.degrees(y_m / EARTH_RADIUS_M)
    lon = math.degrees(x_m / (EARTH_RADIUS_M * math.cos(math.radians(REFERENCE_LATITUDE))))
    return lon, lat


def yaw_deg(vx: float, vy: float) -> float:
    """Heading, degrees clockwise from north, in [0, 360)."""
    return (90.0 - math.degrees(math.atan2(vy, vx))) % 360.0


def roll_deg(vx: float, vy: float, rudder: float, min_turn_radius_m: float) -> float:
    """The bank of a coordinated turn: positive rolls right (rudder > 0 turns left)."""
    lateral = (vx * vx + vy * vy) * rudder / min_turn_radius_m
    return -math.degrees(math.atan(lateral / G))


def _t(x: float, y: float, vx: float, vy: float, rudder: float, radius: float) -> str:
    lon, lat = to_lon_lat(x, y)
    return (f"T={lon:.7f}|{lat:.7f}|{ALTITUDE_M:.0f}|{roll_deg(vx, vy, rudder, radius) + 0.0:.1f}|0|"
            f"{yaw_deg(vx, vy):.1f}")


def write_acmi(replay: Replay, path: Path) -> None:
    """Write ``replay`` as ACMI 2.2 text into ``path`` (atomically)."""
    with atomic_write(path, "w") as out:
        _write(replay, out)


def _escape(text: str) -> str:
    """A property value: commas escaped, no line breaks."""
    return " ".join(text.split()).replace(",", "\\,")


def _reference_time(replay: Replay) -> str:
    created = str(replay.header.get("created_utc", "2000-01-01T00:00:00+00:00"))
    try:
        when = datetime.fromisoformat(created)
    except ValueError:
        when = datetime(2000, 1, 1)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _write(replay: Replay, out: IO[str]) -> None:
    a = replay.arrays
    fighter_radius = replay.config.fighter.min_turn_radius_m
    missile_radius = replay.config.missile.min_turn_radius_m
    names = (_escape(replay.agent("red")), _escape(replay.agent("blue")))
    out.write("FileType=text/acmi/tacview\nFileVersion=2.2\n")
    out.write(f"0,ReferenceTime={_reference_time(replay)}\n")
    out.write(f"0,ReferenceLongitude={REFERENCE_LONGITUDE:g}\n0,ReferenceLatitude={REFERENCE_LATITUDE:g}\n")
    title = f"{names[0]} (red) vs {names[1]} (blue)"
    out.write(f"0,Title={title}\n0,DataSource=midrange-rl replay\n0,Author=midrange-rl\n")
    o = replay.outcome
    comment = _escape(f"{o.get('winner', '?')} {'' if o.get('winner') == 'draw' else 'wins '}"
                      f"({o.get('end_reason', '?')}) at {float(o.get('t_s', 0)):.1f} s")
    out.write(f"0,Comments={comment}\n")
    paths = {m.missile: m for m in replay.missile_paths()}
    events_at: dict[int, list[dict]] = {}
    for e in replay.events:
        events_at.setdefault(int(e["frame"]), []).append(e)
    shown_fighters = [False, False]
    removed_fighters = [False, False]
    shown_missiles: set[int] = set()
    removed_missiles: set[int] = set()
    for i in range(replay.num_frames):
        out.write(f"#{float(a['t_s'][i]):.2f}\n")
        for s in (0, 1):
            if removed_fighters[s]:
                continue
            line = f"{FIGHTER_IDS[s]},{_t(a['f_x'][i, s], a['f_y'][i, s], a['f_vx'][i, s], a['f_vy'][i, s], a['f_rudder'][i, s], fighter_radius)}"
            if not shown_fighters[s]:
                line += (f",Type=Air+FixedWing,Name=Fighter,Pilot={names[s]},"
                         f"Color={COLORS[s]},Coalition={COALITIONS[s]}")
                shown_fighters[s] = True
            out.write(line + "\n")
        for number, m in paths.items():
            k = int(np.searchsorted(m.frames, i))
            if number in removed_missiles or k >= len(m.frames) or m.frames[k] != i:
                continue
            sl = m.side, m.slot
            line = f"{missile_id(number)},{_t(m.x[k], m.y[k], a['m_vx'][i][sl], a['m_vy'][i][sl], a['m_rudder'][i][sl], missile_radius)}"
            if number not in shown_missiles:
                line += (f",Type=Weapon+Missile,Name=Missile,Color={COLORS[m.side]},"
                         f"Coalition={COALITIONS[m.side]},Parent={FIGHTER_IDS[m.side]}")
                shown_missiles.add(number)
            out.write(line + "\n")
        for e in events_at.get(i, []):
            _event(e, out, removed_fighters, removed_missiles)
    # Whatever is still there at the end leaves with the recording.
    for s in (0, 1):
        if not removed_fighters[s]:
            out.write(f"-{FIGHTER_IDS[s]}\n")
    for number in sorted(shown_missiles - removed_missiles):
        out.write(f"-{missile_id(number)}\n")


def _event(e: dict, out: IO[str], removed_fighters: list[bool], removed_missiles: set[int]) -> None:
    kind = e["kind"]
    side_name = ("red", "blue")
    if kind == "launch":
        out.write(f"0,Event=Message|{missile_id(e['missile'])}|{side_name[e['side']]} launches missile {e['missile']}\n")
    elif kind == "hit":
        out.write(f"0,Event=Destroyed|{missile_id(e['missile'])}|hit {side_name[e['target']]}\n")
        out.write(f"-{missile_id(e['missile'])}\n")
        removed_missiles.add(int(e["missile"]))
    elif kind == "missile_lost" and e.get("reason") != "hit":
        out.write(f"0,Event=Timeout|{missile_id(e['missile'])}|{e.get('reason', 'lost')}\n")
        out.write(f"-{missile_id(e['missile'])}\n")
        removed_missiles.add(int(e["missile"]))
    elif kind == "kill":
        out.write(f"0,Event=Destroyed|{FIGHTER_IDS[e['side']]}|\n-{FIGHTER_IDS[e['side']]}\n")
        removed_fighters[e["side"]] = True
    elif kind == "out_of_arena":
        out.write(f"0,Event=LeftArea|{FIGHTER_IDS[e['side']]}|\n-{FIGHTER_IDS[e['side']]}\n")
        removed_fighters[e["side"]] = True
    elif kind == "end":
        winner = e.get("winner", "?")
        result = "draw" if winner == "draw" else f"{winner} wins"
        out.write(f"0,Event=Bookmark|{result} ({e.get('end_reason', '?')})\n")
