"""``python -m pipeline.replay FILE --spacetime OUT [--at SECONDS]``: the spacetime graph (时空图).

At one moment of a recorded fight, seen from one fighter ("own", red by default):

- left, 3-D with x, y (km) and time up (s after the moment): the enemy's threat region for a
  launch now against the own fighter turning away (filled slices) and flying straight on
  (dashed outlines), the own missile's reach against the enemy flying straight on (outlines),
  both fighters' predicted paths (holding rudder and throttle; the full-rudder escape then
  straight), and the tracks they really flew afterwards in the replay;
- right, the same seen from above with time as colour.

The in-reach flags and the escape time margin are written on it. Every region and path comes
from the reach model (:mod:`sim.reach.threat`, :mod:`sim.reach.spacetime`); :func:`spacetime_geometry`
computes them without drawing, :func:`draw_spacetime` draws them (each region slice is a line
whose ``gid`` names it, e.g. ``threat-escape:20``), :func:`write_spacetime` writes the PNG.
matplotlib (the ``viz`` extra) is imported only when drawing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.drawing.png import require_matplotlib, save_figure
from sim.config import SimConfig
from sim.reach.missile import cached_tables
from sim.reach.threat import ReachSummary, escape_path, hold_path, reach_summary, threat_region
from sim.replay.format import Replay

SIDE_NAMES = ("red", "blue")
SIDE_COLORS = ("#dc2828", "#285ae6")


@dataclass(frozen=True)
class FightState:
    """Both fighters at one moment, seen from ``own`` (0 red, 1 blue), plus what followed."""

    config: SimConfig
    t_s: float
    own: int
    x: tuple[float, float]
    y: tuple[float, float]
    vx: tuple[float, float]
    vy: tuple[float, float]
    rudder: tuple[float, float]
    throttle: tuple[float, float]
    future_t_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """``[F]`` times after the moment of the recorded frames that follow (0 first)."""
    future_x: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    """``[F, 2]`` recorded positions of both fighters (while alive)."""
    future_y: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))

    @property
    def enemy(self) -> int:
        return 1 - self.own


def default_moment(replay: Replay) -> float:
    """The first launch's time, or the start of a fight without one."""
    launches = [float(e["t_s"]) for e in replay.events if e.get("kind") == "launch"]
    return launches[0] if launches else 0.0


def fight_state(replay: Replay, at_s: float | None = None, own: int = 0) -> FightState:
    """The moment ``at_s`` (the last recorded frame at or before it; default
    :func:`default_moment`) of ``replay``, seen from side ``own``."""
    if own not in (0, 1):
        raise ValueError(f"own must be 0 (red) or 1 (blue), got {own!r}")
    a = replay.arrays
    t = a["t_s"]
    at = default_moment(replay) if at_s is None else float(at_s)
    if not (float(t[0]) <= at <= float(t[-1])):
        raise ValueError(f"--at {at:g} s is outside the replay ({float(t[0]):g} to {float(t[-1]):.1f} s)")
    i = int(np.searchsorted(t, at + 1e-9, side="right") - 1)
    if not bool(a["f_alive"][i].all()):
        raise ValueError(f"at {float(t[i]):.1f} s a fighter is already destroyed: pick an earlier --at")
    alive = a["f_alive"][i:]
    fx = np.where(alive, a["f_x"][i:], np.nan)
    fy = np.where(alive, a["f_y"][i:], np.nan)

    def pair(name: str) -> tuple[float, float]:
        return float(a[name][i][0]), float(a[name][i][1])

    return FightState(
        config=replay.config, t_s=float(t[i]), own=own,
        x=pair("f_x"), y=pair("f_y"), vx=pair("f_vx"), vy=pair("f_vy"),
        rudder=pair("f_rudder"), throttle=pair("f_throttle"),
        future_t_s=t[i:] - t[i], future_x=fx, future_y=fy,
    )


@dataclass
class SpacetimeGeometry:
    """What the spacetime graph draws, in metres and seconds after the moment."""

    slice_times_s: np.ndarray
    """``[S]`` times of the region slices."""
    threat_escape: tuple[np.ndarray, np.ndarray]
    """``x, y`` ``[S, B]``: the enemy's threat region (launch now) against me turning away."""
    threat_straight: tuple[np.ndarray, np.ndarray]
    """The same against me flying straight on."""
    own_reach: tuple[np.ndarray, np.ndarray]
    """My missile's region (launch now) against the enemy flying straight on."""
    path_times_s: np.ndarray
    """``[P]`` times of the predicted paths."""
    paths: dict[str, tuple[np.ndarray, np.ndarray]]
    """``own hold``, ``own escape``, ``enemy hold``, ``enemy escape``: ``x, y`` ``[P]``."""
    summary: ReachSummary


def spacetime_geometry(
    state: FightState, horizon_s: float = 60.0, slice_s: float = 5.0, path_step_s: float = 1.0,
) -> SpacetimeGeometry:
    """Regions every ``slice_s`` and paths every ``path_step_s`` up to ``horizon_s``."""
    cfg, o, e = state.config, state.own, state.enemy
    tables = cached_tables(cfg, "cpu", "float64")
    slices = torch.arange(0.0, horizon_s + 1e-9, slice_s, dtype=torch.float64)
    steps = torch.arange(0.0, horizon_s + 1e-9, path_step_s, dtype=torch.float64)
    speed = [math.hypot(state.vx[s], state.vy[s]) for s in (0, 1)]
    heading = [math.atan2(state.vy[s], state.vx[s]) for s in (0, 1)]

    def region(launcher: int, target: int, escape: bool) -> tuple[np.ndarray, np.ndarray]:
        x, y = threat_region(tables, cfg, (state.x[launcher], state.y[launcher]), speed[launcher],
                             heading[target], speed[target], escape, slices)
        return x.numpy(), y.numpy()

    def hold(s: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = hold_path(cfg, state.x[s], state.y[s], state.vx[s], state.vy[s], state.rudder[s],
                         state.throttle[s], steps)
        return x.numpy(), y.numpy()

    def escape(s: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = escape_path(cfg, state.x[s], state.y[s], state.vx[s], state.vy[s],
                           (state.x[1 - s], state.y[1 - s]), steps)
        return x.numpy(), y.numpy()

    return SpacetimeGeometry(
        slice_times_s=slices.numpy(),
        threat_escape=region(e, o, True),
        threat_straight=region(e, o, False),
        own_reach=region(o, e, False),
        path_times_s=steps.numpy(),
        paths={"own hold": hold(o), "own escape": escape(o), "enemy hold": hold(e), "enemy escape": escape(e)},
        summary=reach_summary(tables, (state.x[o], state.y[o]), (state.vx[o], state.vy[o]),
                              (state.x[e], state.y[e]), (state.vx[e], state.vy[e])),
    )


def summary_text(state: FightState, s: ReachSummary) -> str:
    """The flags and the margin, as written on the graph."""
    own, enemy = SIDE_NAMES[state.own], SIDE_NAMES[state.enemy]

    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    return "\n".join([
        f"t = {state.t_s:.1f} s, seen from {own}; range {s.range_m / 1e3:.1f} km",
        f"{enemy} in {own}'s reach: {yes(s.enemy_in_own_reach)} "
        f"(straight {s.own_reach_straight_m / 1e3:.1f} km, turning away {s.own_reach_escape_m / 1e3:.1f} km)",
        f"{own} in {enemy}'s reach: {yes(s.own_in_enemy_reach)} (straight {s.enemy_reach_straight_m / 1e3:.1f} km)",
        f"{own} can outrun a launch now by turning away: {yes(s.own_escape_possible)} "
        f"(reach {s.enemy_reach_escape_m / 1e3:.1f} km)",
        f"escape time margin: {s.escape_margin_s:+.1f} s",
    ])


def draw_spacetime(state: FightState, geom: SpacetimeGeometry, title: str = "") -> Any:
    """The figure: 3-D (x, y in km, t up) on the left, top-down with time as colour on the
    right. Region slices are lines with ``gid`` ``{threat-escape|threat-straight|own-reach}:{t}``
    (km) in both panels."""
    plt = require_matplotlib("--spacetime")
    from matplotlib.collections import LineCollection
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    fig = plt.figure(figsize=(15, 7.2))
    ax3 = fig.add_subplot(1, 2, 1, projection="3d")
    ax2 = fig.add_subplot(1, 2, 2)
    cmap = plt.get_cmap("viridis")
    horizon = float(geom.slice_times_s[-1]) or 1.0
    o, e = state.own, state.enemy
    regions = (
        ("threat-escape", geom.threat_escape, SIDE_COLORS[e], "-"),
        ("threat-straight", geom.threat_straight, SIDE_COLORS[e], "--"),
        ("own-reach", geom.own_reach, SIDE_COLORS[o], ":"),
    )
    for name, (xs, ys), color, style in regions:
        for k, t in enumerate(geom.slice_times_s):
            if k == 0:
                continue  # at t = 0 nothing is caught yet
            x, y = xs[k] / 1e3, ys[k] / 1e3
            gid = f"{name}:{t:g}"
            ax3.plot(x, y, np.full_like(x, t), color=color, ls=style, lw=0.8, gid=gid)
            ax2.plot(x, y, color=cmap(t / horizon), ls=style, lw=1.0, gid=gid)
            if name == "threat-escape":
                ax3.add_collection3d(Poly3DCollection([list(zip(x, y, np.full_like(x, t), strict=True))],
                                                      facecolor=color, alpha=0.07, edgecolor="none"))
    styles = {"own hold": (SIDE_COLORS[o], "-"), "own escape": (SIDE_COLORS[o], "--"),
              "enemy hold": (SIDE_COLORS[e], "-"), "enemy escape": (SIDE_COLORS[e], "--")}
    for name, (x, y) in geom.paths.items():
        color, style = styles[name]
        label = name.replace("own", SIDE_NAMES[o]).replace("enemy", SIDE_NAMES[e])
        label += " (rudder held)" if "hold" in name else " (full-rudder escape, then straight)"
        ax3.plot(x / 1e3, y / 1e3, geom.path_times_s, color=color, ls=style, lw=2.0, label=label)
        pts = np.stack([x / 1e3, y / 1e3], 1)
        segs = np.stack([pts[:-1], pts[1:]], 1)
        lc = LineCollection(list(segs), cmap=cmap, norm=plt.Normalize(0, horizon), linestyles=style, lw=2.5)
        lc.set_array(geom.path_times_s[:-1])
        ax2.add_collection(lc)
        ax2.plot(x[-1] / 1e3, y[-1] / 1e3, marker=">", color=color, ms=5)
    keep = state.future_t_s <= horizon
    for s in (0, 1):
        fx, fy = state.future_x[keep, s] / 1e3, state.future_y[keep, s] / 1e3
        ax3.plot(fx, fy, state.future_t_s[keep], color="black", lw=1.0, alpha=0.7,
                 label="flown (replay)" if s == 0 else None)
        ax2.plot(fx, fy, color="black", lw=0.8, alpha=0.6)
        ax2.plot(state.x[s] / 1e3, state.y[s] / 1e3, "o", color=SIDE_COLORS[s], ms=7)
        ax3.scatter([state.x[s] / 1e3], [state.y[s] / 1e3], [0.0], color=SIDE_COLORS[s], s=30)
    ax3.set_xlabel("x (km)")
    ax3.set_ylabel("y (km)")
    ax3.set_zlabel("time after the moment (s)")
    ax3.set_zlim(0, horizon)
    ax3.legend(loc="upper left", fontsize=7)
    ax2.set_aspect("equal", adjustable="datalim")
    ax2.set_xlabel("x (km)")
    ax2.set_ylabel("y (km)")
    ax2.set_title("from above; colour: time after the moment (s). Solid region: "
                  f"{SIDE_NAMES[e]}'s launch vs {SIDE_NAMES[o]} turning away; dashed: flying straight; "
                  f"dotted: {SIDE_NAMES[o]}'s reach", fontsize=8)
    ax2.autoscale_view()
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, horizon))
    fig.colorbar(sm, ax=ax2, fraction=0.04, pad=0.02, label="s")
    fig.text(0.01, 0.01, summary_text(state, geom.summary), fontsize=9, family="monospace", va="bottom")
    fig.suptitle(title or f"spacetime graph at {state.t_s:.1f} s", fontsize=11, parse_math=False)
    fig.subplots_adjust(left=0.02, right=0.97, top=0.92, bottom=0.16, wspace=0.12)
    return fig


def write_spacetime(replay: Replay, path: Path, at_s: float | None = None, own: int = 0,
                    horizon_s: float = 60.0) -> FightState:
    """Draw the spacetime graph of ``replay`` at ``at_s`` into ``path`` (PNG); returns the
    moment drawn."""
    plt = require_matplotlib("--spacetime")
    state = fight_state(replay, at_s, own)
    geom = spacetime_geometry(state, horizon_s)
    title = (f"spacetime graph · red: {replay.agent('red')} vs blue: {replay.agent('blue')} · "
             f"at {state.t_s:.1f} s, horizon {horizon_s:g} s")
    fig = draw_spacetime(state, geom, title)
    try:
        save_figure(fig, path, "png", dpi=110)
    finally:
        plt.close(fig)
    return state
