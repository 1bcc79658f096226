"""Replays in the page: ``python -m pipeline.play --replay FILE``, or a file chosen or dropped in
the page (``static/replay.js``).

A replay is read whole with the project's reader (:func:`sim.replay.format.load_replay`, which
checks every record), so a damaged file is refused with its :class:`ReplayError` message and
nothing of it is kept. An opened replay is a :class:`ReplayFile` in the server's
:class:`ReplayShelf` under a random name; the page first receives its ``replay_info`` message
(agents, duration, frame times, events for the timeline), then asks for moments with
``{"type": "seek", "replay": NAME, "t": SECONDS, "seat": "red"|"blue"}`` and receives a
``state`` message of the same form as live play (so the same drawing code shows it), for the
recorded frame at or before that time, with the spacetime graph of that moment seen from
``seat`` and ``"replay": {"name", "frame"}`` added.

A file sent by the page is at most ``UPLOAD_LIMIT_BYTES``; it is read from a private temporary
folder that is removed at once, so nothing of it stays on disk.
"""

from __future__ import annotations

import math
import secrets
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.play.spacetime import SEATS, frame_payload
from sim.replay.episode import Replay, printable
from sim.replay.format import ReplayError, load_replay

UPLOAD_LIMIT_BYTES = 64 << 20
"""The largest replay file the page may send (a five-minute fight is well under 1 MiB)."""
SHELF_SIZE = 8
"""Replays kept open by one server; opening one more closes the oldest."""
TIMELINE_KINDS = {"launch", "hit", "missile_lost", "kill", "out_of_arena", "time_limit", "ammo_out", "end"}
"""Event kinds marked on the timeline (a ``missile_lost`` for any reason but a hit is a miss)."""


def timeline_event(event: dict[str, Any]) -> dict[str, Any] | None:
    """One replay event as the page's timeline marks it: ``t``, ``kind`` (``launch``, ``hit``,
    ``miss``, ``kill``, ``out``, ``end``...), ``side`` and a short text; None for those not
    marked."""
    kind = str(event.get("kind"))
    if kind not in TIMELINE_KINDS:
        return None
    side = event.get("side")
    name = SEATS[side] if side in (0, 1) else None
    if kind == "missile_lost":
        if event.get("reason") == "hit":
            return None  # the hit event marks it
        kind, text = "miss", f"{name} missile {event.get('missile')} lost ({event.get('reason')})"
    elif kind == "launch":
        text = f"{name} launches missile {event.get('missile')}"
    elif kind == "hit":
        text = f"{name} missile {event.get('missile')} hits"
    elif kind == "kill":
        text = f"{name} destroyed"
    elif kind == "out_of_arena":
        kind, text = "out", f"{name} left the arena"
    elif kind == "end":
        text = f"end: {event.get('winner')} ({event.get('end_reason')})"
    else:
        text = kind.replace("_", " ")
    marked = {"t": float(event["t_s"]), "kind": kind, "side": name, "text": printable(text)}
    if kind == "end":
        marked.update(winner=printable(str(event.get("winner"))), reason=printable(str(event.get("end_reason"))))
    return marked


class ReplayFile:
    """One opened replay: its ``replay_info`` message and its moments as ``state`` messages."""

    def __init__(self, replay: Replay, name: str, label: str) -> None:
        self.replay = replay
        self.name = name
        self.label = printable(label)
        self.times = np.asarray(replay.arrays["t_s"], dtype=np.float64)
        self._graphs: dict[tuple[int, int], dict[str, Any] | None] = {}

    def info(self) -> dict[str, Any]:
        """The ``replay_info`` message: what the page's timeline needs."""
        r = self.replay
        events = [e for e in (timeline_event(ev) for ev in r.events) if e is not None]
        return {
            "type": "replay_info", "replay": self.name, "file": self.label,
            "agents": {"red": r.agent("red"), "blue": r.agent("blue")},
            "scenario": printable(str(r.header.get("scenario", "?"))),
            "start": float(self.times[0]), "duration": float(self.times[-1]),
            "frames": int(self.times.shape[0]), "dt": float(r.header.get("decision_dt_s") or r.config.decision_dt_s),
            "times": [round(float(t), 3) for t in self.times],
            "events": events,
            "outcome": {k: printable(str(v)) for k, v in r.outcome.items()},
        }

    def frame_index(self, t: float) -> int:
        """The last recorded frame at or before ``t`` (the first one before the start)."""
        return max(int(np.searchsorted(self.times, t + 1e-9, side="right")) - 1, 0)

    def state(self, t: float, seat: str) -> dict[str, Any]:
        """The ``state`` message of the recorded frame at or before ``t``, seen from ``seat``."""
        if seat not in SEATS:
            raise ValueError(f"seat must be one of {', '.join(SEATS)}, got {seat!r}")
        i = self.frame_index(t)
        r, a = self.replay, self.replay.arrays
        frame = r.frame(i)
        since = float(self.times[i - 1]) if i else -math.inf
        fighters = [{
            "side": SEATS[s], "x": round(float(frame["f_x"][s]), 2), "y": round(float(frame["f_y"][s]), 2),
            "heading": round(math.atan2(float(frame["f_vy"][s]), float(frame["f_vx"][s])), 5),
            "speed": round(math.hypot(float(frame["f_vx"][s]), float(frame["f_vy"][s])), 2),
            "alive": bool(frame["f_alive"][s]), "missiles_left": int(frame["f_ammo"][s]),
            "fire_ready": bool(frame["f_alive"][s]) and int(frame["f_ammo"][s]) > 0,
        } for s in (0, 1)]
        missiles = []
        for s in (0, 1):
            for j in range(a["m_active"].shape[2]):
                if frame["m_active"][s, j]:
                    missiles.append({
                        "id": f"{SEATS[s]}-{int(frame['m_id'][s, j])}", "side": SEATS[s],
                        "x": round(float(frame["m_x"][s, j]), 2), "y": round(float(frame["m_y"][s, j]), 2),
                        "heading": round(math.atan2(float(frame["m_vy"][s, j]), float(frame["m_vx"][s, j])), 5),
                        "speed": round(math.hypot(float(frame["m_vx"][s, j]), float(frame["m_vy"][s, j])), 2),
                        "alive": True,
                    })
        events = [e for e in (timeline_event(ev) for ev in r.events) if e is not None and since < e["t"] <= self.times[i]]
        own = SEATS.index(seat)
        if (i, own) not in self._graphs:
            self._graphs[(i, own)] = frame_payload(frame, r.config, own)
        graph = self._graphs[(i, own)]
        hud: dict[str, Any] = {"seat": seat, "speed": fighters[own]["speed"],
                               "missiles_left": fighters[own]["missiles_left"], "alive": fighters[own]["alive"]}
        if graph is not None:
            hud.update(graph["hud"])
        score = {"red": 0, "draws": 0, "blue": 0}
        winner = {"red": "red", "blue": "blue", "draw": "draws"}.get(str(r.outcome.get("winner")))
        if i == len(self.times) - 1 and winner is not None:
            score[winner] = 1  # the recorded round's result, once its last frame is shown
        return {
            "type": "state", "t": round(float(self.times[i]), 3), "dt": float(r.config.decision_dt_s),
            "round": 0, "paused": False, "time_scale": 1.0, "scenario": printable(str(r.header.get("scenario", "?"))),
            "fighters": fighters, "missiles": missiles, "events": events, "score": score,
            "seats": {"red": {"spec": r.agent("red"), "human": False}, "blue": {"spec": r.agent("blue"), "human": False}},
            "hud": hud, "spacetime": graph, "replay": {"name": self.name, "frame": i},
        }


class ReplayShelf:
    """The replays a server has open, by name (at most ``SHELF_SIZE``, oldest closed first)."""

    def __init__(self) -> None:
        self._files: OrderedDict[str, ReplayFile] = OrderedDict()

    def _add(self, replay: Replay, label: str) -> ReplayFile:
        name = secrets.token_hex(8)
        opened = ReplayFile(replay, name, label)
        self._files[name] = opened
        while len(self._files) > SHELF_SIZE:
            self._files.popitem(last=False)
        return opened

    def open_path(self, path: str | Path) -> ReplayFile:
        """Open the replay at ``path``; :class:`ReplayError` says why one cannot be read."""
        return self._add(load_replay(path), Path(path).name)

    def open_bytes(self, data: bytes, label: str) -> ReplayFile:
        """Open a replay sent by the page (the file's bytes, its name for display only)."""
        shown = printable(label or "replay", 80)
        if len(data) > UPLOAD_LIMIT_BYTES:
            raise ReplayError(f"{shown}: {len(data)} bytes, more than the {UPLOAD_LIMIT_BYTES >> 20} MiB "
                              "a replay sent to the page may have")
        with tempfile.TemporaryDirectory(prefix="midrange-replay-") as folder:
            path = Path(folder) / "upload.replay"
            path.write_bytes(data)
            try:
                replay = load_replay(path)
            except ReplayError as exc:
                raise ReplayError(str(exc).replace(str(path), shown, 1)) from None
        replay.path = None
        return self._add(replay, shown)

    def get(self, name: object) -> ReplayFile:
        """The open replay called ``name``; ``KeyError`` (with a message) if there is none."""
        if not isinstance(name, str) or name not in self._files:
            raise KeyError(f"no open replay {printable(str(name), 40)!r}: open the file again")
        return self._files[name]
