"""The live spacetime graph's numbers and the HUD's reach figures, for one seat at one moment.

:func:`payload` turns a moment of a fight (a frame named as in :mod:`sim.replay.format`, from the
live sim or from a replay) into what the page's 3-D graph draws (``static/spacetime.js``): x, y
and time up, seen from the pilot in ``seat``:

- ``threat_escape`` / ``threat_straight``: the enemy missile's threat region for a launch now
  against the own fighter turning away / flying straight on (None when the enemy is out of
  missiles);
- ``own_reach``: the own missile's region for a launch now against the enemy flying straight on
  (None when out of missiles);
- ``paths``: both fighters' predicted paths, holding rudder and throttle and flying the escape
  turn away from the other;
- ``hud``: speed, missiles left, the in-reach flags and the escape time margin.

Everything comes from the reach model the sim, the scripted agents and the matplotlib graph
(:mod:`pipeline.drawing.spacetime`) use: :func:`sim.reach.threat.threat_region`,
:func:`~sim.reach.threat.escape_path`, :func:`~sim.reach.threat.reach_summary`, with the
fighters' paths looked up in tables built once per config (:mod:`pipeline.play.path_tables`)
instead of integrated at every call. A region is computed with the target heading along +x
around the origin (so every bearing's path is a table row) and rotated into place.

The output is compact, a few KB of JSON: region slices every ``SLICE_S`` seconds with
``BEARINGS + 1`` points each, paths every ``PATH_STEP_S``, all as integers in units of
``UNIT_M`` relative to ``origin`` (the own fighter). One call costs some 24 ms on one loaded
core once the tables are built, against over 700 ms step by step (``bench/play_spacetime.py``);
the tables take a few seconds, once per process and physics config (:func:`warm`,
:func:`reach_if_ready`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from core.command import squeezed
from pipeline.play.path_tables import HoldPathTable, TargetPathTable
from sim.config import SimConfig
from sim.envs.render import frame_from_state
from sim.reach.missile import MissileTables, cached_tables
from sim.reach.threat import escape_path, reach_summary, threat_region
from sim.state import SimState

SEATS = ("red", "blue")
HORIZON_S = 60.0
"""How far ahead the graph looks (its time axis)."""
SLICE_S = 10.0
"""Time between two slices of a region."""
PATH_STEP_S = 2.0
"""Time between two points of a predicted path."""
BEARINGS = 36
"""Points around a region's slice (plus the closing one)."""
REFRESH_S = 0.5
"""Sim time after which :func:`payload` computes the graph anew (the default decision period)."""
UNIT_M = 100.0
"""Coordinates are sent as integers in this unit, relative to ``origin``."""
TABLE_STEP_S = 1.0
"""Time grid of the path tables (slices and path points lie on it)."""

F64 = torch.float64
log = logging.getLogger(__name__)


class SessionState(Protocol):
    """What :func:`payload` reads of a fight (``pipeline.play.session.SessionView``): the
    simulator's state of the frame shown (environment 0), its config and the time."""

    @property
    def state(self) -> SimState: ...

    @property
    def config(self) -> SimConfig: ...

    @property
    def t(self) -> float: ...


class Reach:
    """The reach tables and path tables of one config (built once, :func:`reach_for`)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.tables: MissileTables = cached_tables(config, "cpu", "float64")
        grid = torch.arange(0.0, HORIZON_S + 1e-9, TABLE_STEP_S, dtype=F64)
        self.slices = torch.arange(0.0, HORIZON_S + 1e-9, SLICE_S, dtype=F64)
        self.steps = torch.arange(0.0, HORIZON_S + 1e-9, PATH_STEP_S, dtype=F64)
        self.target_paths = TargetPathTable(config, grid, BEARINGS)
        self.hold_paths = HoldPathTable(config, grid)


_DEFAULTS = SimConfig()
_reaches: dict[SimConfig, Reach] = {}
_builders: dict[SimConfig, threading.Thread] = {}
_lock = threading.Lock()


def physics_of(config: SimConfig) -> SimConfig:
    """``config`` without what the reach model does not depend on (the scenario, the time
    limit), so fights that differ only in those share tables."""
    return config.replace(scenario=_DEFAULTS.scenario, max_time_s=_DEFAULTS.max_time_s)


def reach_for(config: SimConfig) -> Reach:
    """:class:`Reach` for ``config``, built on the first call (a few seconds) and kept."""
    key = physics_of(config)
    with _lock:
        found = _reaches.get(key)
    if found is None:
        built = Reach(key)
        with _lock:
            found = _reaches.setdefault(key, built)
    return found


def reach_if_ready(config: SimConfig) -> Reach | None:
    """:class:`Reach` for ``config`` if it is built; else None, and it is being built in a
    thread of its own (so a live fight's clock never waits for it)."""
    key = physics_of(config)
    with _lock:
        if key in _reaches:
            return _reaches[key]
        if key not in _builders:
            _builders[key] = threading.Thread(target=_build, args=(key,), name="spacetime-tables", daemon=True)
            _builders[key].start()
    return None


def _build(config: SimConfig) -> None:
    try:
        reach_for(config)
    except (ValueError, RuntimeError) as exc:  # a config the reach model cannot tabulate
        log.warning("spacetime graph: no tables for this sim config (%s); the graph stays empty",
                    squeezed(exc))


def warm(config: SimConfig) -> None:
    """Build the tables for ``config`` now (a few seconds), not at the first :func:`payload`."""
    reach_for(config)


def _ints(values: torch.Tensor | np.ndarray, origin: float) -> list[int]:
    return [int(v) for v in np.rint((np.asarray(values, dtype=np.float64) - origin) / UNIT_M)]


def frame_payload(frame: Mapping[str, np.ndarray], config: SimConfig, own: int,
                  reach: Reach | None = None) -> dict[str, Any] | None:
    """The graph and HUD numbers of ``frame`` seen from side ``own`` (0 red, 1 blue); None when
    a fighter is destroyed (the graph of a finished duel shows nothing). ``reach``: the
    tables to use (default :func:`reach_for` ``config``, built if need be)."""
    alive = np.asarray(frame["f_alive"], dtype=bool)
    if not bool(alive.all()):
        return None
    r = reach if reach is not None else reach_for(config)
    e = 1 - own
    x = [float(frame["f_x"][s]) for s in (0, 1)]
    y = [float(frame["f_y"][s]) for s in (0, 1)]
    vx = [float(frame["f_vx"][s]) for s in (0, 1)]
    vy = [float(frame["f_vy"][s]) for s in (0, 1)]
    ammo = [int(frame["f_ammo"][s]) for s in (0, 1)]
    speed = [math.hypot(vx[s], vy[s]) for s in (0, 1)]
    heading = [math.atan2(vy[s], vx[s]) for s in (0, 1)]
    ox, oy = x[own], y[own]

    def region(launcher: int, target: int, escape: bool) -> list[list[int]] | None:
        if ammo[launcher] <= 0:
            return None
        # Target heading along +x around the origin, then rotated by its heading and moved.
        rx, ry = threat_region(r.tables, r.config, (0.0, 0.0), speed[launcher], 0.0, speed[target], escape,
                               r.slices, BEARINGS, r.target_paths)
        c, s = math.cos(heading[target]), math.sin(heading[target])
        wx, wy = x[launcher] + rx * c - ry * s, y[launcher] + rx * s + ry * c
        return [_ints(wx[k], ox) + _ints(wy[k], oy) for k in range(1, wx.shape[0])]

    def paths(s: int) -> dict[str, list[int]]:
        hx, hy = r.hold_paths.path(x[s], y[s], vx[s], vy[s], float(frame["f_rudder"][s]),
                                   float(frame["f_throttle"][s]), r.steps)
        ex, ey = escape_path(r.config, x[s], y[s], vx[s], vy[s], (x[1 - s], y[1 - s]), r.steps, r.target_paths)
        return {"hold": _ints(hx, ox) + _ints(hy, oy), "escape": _ints(ex, ox) + _ints(ey, oy)}

    summary = reach_summary(r.tables, (x[own], y[own]), (vx[own], vy[own]), (x[e], y[e]), (vx[e], vy[e]))
    return {
        "seat": SEATS[own],
        "t": float(frame["t_s"]),
        "origin": [ox, oy],
        "unit_m": UNIT_M,
        "horizon_s": HORIZON_S,
        "slice_t": [float(t) for t in r.slices[1:]],
        "path_t": [float(t) for t in r.steps],
        "fighters": [{"side": SEATS[s], "x": round((x[s] - ox) / UNIT_M), "y": round((y[s] - oy) / UNIT_M)}
                     for s in (own, e)],
        "threat_escape": region(e, own, True),
        "threat_straight": region(e, own, False),
        "own_reach": region(own, e, False),
        "paths": {"own": paths(own), "enemy": paths(e)},
        "hud": {
            "speed_mps": round(speed[own], 1),
            "missiles_left": ammo[own],
            "enemy_missiles_left": ammo[e],
            "range_m": round(summary.range_m),
            "own_reach_straight_m": round(summary.own_reach_straight_m),
            "own_reach_escape_m": round(summary.own_reach_escape_m),
            "enemy_reach_straight_m": round(summary.enemy_reach_straight_m),
            "enemy_reach_escape_m": round(summary.enemy_reach_escape_m),
            "enemy_in_own_reach": summary.enemy_in_own_reach,
            "own_in_enemy_reach": summary.own_in_enemy_reach,
            "own_escape_possible": summary.own_escape_possible,
            "escape_margin_s": round(summary.escape_margin_s, 1),
        },
    }


@dataclass
class _Shown:
    """One seat's graph: the moment it was asked for, the computation under way, the result."""

    t: float
    ammo: tuple[int, ...]
    alive: tuple[bool, ...]
    pending: Future[dict[str, Any] | None]
    graph: dict[str, Any] | None = None
    """The last graph computed (None: none yet, or a fighter is down)."""


_shown: dict[tuple[str, SimConfig], _Shown] = {}
_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spacetime")


def payload(session_state: SessionState, seat: str) -> dict[str, Any] | None:
    """The state message's ``spacetime`` entry and the HUD's reach figures (``hud``) for the
    pilot in ``seat`` (``red`` or ``blue``); None when a fighter is destroyed, or before the
    first graph of a fight is ready.

    Never waits: the graph is computed in a worker thread, from a copy of the frame, when the
    fight's time has moved ``REFRESH_S`` on (or back) since the last one for this seat and
    config, or a launch or a kill happened, and each call returns the newest finished one (its
    ``t`` says which moment it shows). At 20 states a second that is one computation in every
    ten, and the fight's clock is held up by none. While the tables for the config are being
    built (:func:`reach_if_ready`, the first seconds of a fight on a new config) there is none.
    """
    if seat not in SEATS:
        raise ValueError(f"seat must be one of {SEATS}, got {seat!r}")
    state, config, t = session_state.state, session_state.config, float(session_state.t)
    reach = reach_if_ready(config)
    if reach is None:
        return None
    ammo = tuple(int(v) for v in state.f_ammo[:, 0].tolist())
    alive = tuple(bool(v) for v in state.f_alive[:, 0].tolist())
    key = (seat, config)
    last = _shown.get(key)
    if last is not None and last.pending.done():
        last.graph = last.pending.result()
    due = last is None or not (last.t <= t < last.t + REFRESH_S) or last.ammo != ammo or last.alive != alive
    if due and (last is None or last.pending.done()):
        frame = frame_from_state(state, 0, config)  # a host copy: the sim steps on meanwhile
        frame["t_s"] = np.float64(t)
        pending = _worker.submit(frame_payload, frame, config, SEATS.index(seat), reach)
        last = _Shown(t, ammo, alive, pending, last.graph if last is not None else None)
        _shown[key] = last
    if last is None or last.graph is None:
        return None
    return {"spacetime": last.graph, "hud": last.graph["hud"]}


def settle() -> None:
    """Wait for the graphs being computed (for tests and benchmarks; :func:`payload` never
    waits)."""
    for shown in list(_shown.values()):
        shown.pending.result()
