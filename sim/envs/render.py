"""The top-down picture of a duel, as an RGB array: one drawing for ``render_mode="rgb_array"``
and for the animated replays of ``python -m pipeline.replay --gif/--mp4``.

A frame is a dict of per-frame arrays named as in :mod:`sim.replay.format` (``f_x [2]``,
``m_x [2, M]``, ...); :func:`frame_from_state` reads one from a live :class:`SimState`. The
picture shows both fighters (red and blue triangles along their heading, a cross when
destroyed) with their recent tracks, every missile in flight with its track, each side's
**threat region** (where a missile launched now from that fighter reaches the other fighter
flying straight on, from the reach model of :mod:`sim.reach.spacetime`, drawn at every bearing), a
10 km grid, a scale bar and the time.

Drawing uses Pillow, imported when the first picture is drawn (an optional extra:
``pip install 'midrange-rl[viz]'``). The simulator never imports this module; the Gymnasium
envs import it only when asked for ``render_mode="rgb_array"``.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sim.config import SimConfig
from sim.state import SimState

WIDTH, HEIGHT = 640, 480
"""Default picture size (pixels)."""

SIDE_COLORS = ((220, 40, 40), (40, 90, 230))
"""Red and blue, RGB."""
MISSILE_COLORS = ((150, 0, 0), (0, 40, 150))
THREAT_FILLS = ((235, 60, 60, 48), (60, 110, 240, 48))
BACKGROUND = (250, 250, 246)
GRID = (225, 225, 218)
INK = (40, 40, 40)
THREAT_BEARINGS = 72
"""Bearings at which the threat region's edge is evaluated."""
TRAIL_FRAMES = 240
"""Frames of track drawn behind a fighter in an env's picture (two minutes of sim time)."""


def require_pillow(what: str = "drawing") -> Any:
    """``PIL.Image``, or an ``ImportError`` saying how to install it."""
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(f"{what} needs Pillow: pip install 'midrange-rl[viz]' (or pip install pillow)") from None
    return Image


@dataclass(frozen=True)
class View:
    """Which part of the plane a picture shows: centre (m), metres per pixel, size (pixels)."""

    center_x_m: float
    center_y_m: float
    m_per_px: float
    width: int = WIDTH
    height: int = HEIGHT

    def to_px(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Plane (x east, y north, m) to pixels (column, row; rows grow downwards)."""
        col = (np.asarray(x, dtype=np.float64) - self.center_x_m) / self.m_per_px + self.width / 2
        row = self.height / 2 - (np.asarray(y, dtype=np.float64) - self.center_y_m) / self.m_per_px
        return col, row

    def holds(self, x: np.ndarray, y: np.ndarray, inner: float = 0.8) -> bool:
        """Whether every point lies in the central ``inner`` part of the picture."""
        col, row = self.to_px(x, y)
        mx, my = self.width * (1 - inner) / 2, self.height * (1 - inner) / 2
        return bool(np.all((col >= mx) & (col <= self.width - mx) & (row >= my) & (row <= self.height - my)))


def fit_view(x: np.ndarray, y: np.ndarray, width: int = WIDTH, height: int = HEIGHT,
             margin: float = 0.12, min_span_m: float = 20_000.0) -> View:
    """The view that shows every point (with a margin), at least ``min_span_m`` across."""
    x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = (x[ok], y[ok]) if ok.any() else (np.zeros(1), np.zeros(1))
    cx, cy = (x.max() + x.min()) / 2, (y.max() + y.min()) / 2
    span_x, span_y = max(x.max() - x.min(), min_span_m), max(y.max() - y.min(), min_span_m)
    m_per_px = max(span_x / (width * (1 - 2 * margin)), span_y / (height * (1 - 2 * margin)))
    return View(float(cx), float(cy), float(m_per_px), width, height)


def frame_from_state(state: SimState, env: int, config: SimConfig) -> dict[str, np.ndarray]:
    """Frame ``env`` of a live sim state, named as in the replay format (one host copy)."""
    names = ("f_px", "f_py", "f_vx", "f_vy", "f_throttle", "f_rudder", "f_alive", "f_ammo",
             "m_active", "m_px", "m_py", "m_vx", "m_vy", "m_steps")
    host = {k: getattr(state, k)[..., env].to("cpu", copy=True).numpy() for k in names}
    steps = host["m_steps"].astype(np.int64)
    return {
        "t_s": np.float64(int(state.physics_steps[env]) * config.dt_s),
        "f_x": host["f_px"], "f_y": host["f_py"], "f_vx": host["f_vx"], "f_vy": host["f_vy"],
        "f_throttle": host["f_throttle"], "f_rudder": host["f_rudder"], "f_alive": host["f_alive"],
        "f_ammo": host["f_ammo"], "m_active": host["m_active"], "m_x": host["m_px"],
        "m_y": host["m_py"], "m_vx": host["m_vx"], "m_vy": host["m_vy"],
        "m_burn_left_s": np.maximum(config.burn_steps - steps, 0) * config.dt_s,
    }


@functools.lru_cache(maxsize=4)
def _tables(config: SimConfig) -> Any:
    from sim.reach.missile import missile_tables

    return missile_tables(config)


def threat_regions(frame: dict[str, np.ndarray], config: SimConfig,
                   bearings: int = THREAT_BEARINGS) -> list[np.ndarray | None]:
    """Per side (as shooter), the edge of its threat region: ``[bearings, 2]`` points (m) at
    which a missile launched now from that fighter just reaches the other fighter, were the
    other fighter there and flying straight on at its present velocity; None for a side that is
    destroyed or has no missile left (or whose target is gone)."""
    from sim.reach.spacetime import reach_straight

    tables = _tables(config)
    theta = torch.linspace(0.0, 2 * math.pi, bearings + 1, dtype=torch.float64)[:-1]
    out: list[np.ndarray | None] = []
    for s in (0, 1):
        o = 1 - s
        if not (frame["f_alive"][s] and frame["f_alive"][o] and frame["f_ammo"][s] > 0):
            out.append(None)
            continue
        v_s = float(np.hypot(frame["f_vx"][s], frame["f_vy"][s]))
        v_o = float(np.hypot(frame["f_vx"][o], frame["f_vy"][o]))
        psi_o = math.atan2(float(frame["f_vy"][o]), float(frame["f_vx"][o]))
        rel = psi_o - theta  # the target's heading relative to the line of sight at bearing θ
        reach = reach_straight(tables, torch.full_like(theta, v_s), torch.full_like(theta, v_o),
                               torch.cos(rel), torch.sin(rel))
        r = reach.numpy()
        pts = np.stack([frame["f_x"][s] + r * np.cos(theta.numpy()), frame["f_y"][s] + r * np.sin(theta.numpy())], axis=1)
        out.append(pts)
    return out


def _nice_length(m: float) -> float:
    """1, 2 or 5 times a power of ten, at most ``m``."""
    p = 10 ** math.floor(math.log10(max(m, 1e-9)))
    return max(k * p for k in (1, 2, 5) if k * p <= m)


def draw_frame(frame: dict[str, np.ndarray], view: View, config: SimConfig, *,
               fighter_tracks: Sequence[np.ndarray] | None = None,
               missile_tracks: Sequence[tuple[int, np.ndarray]] = (),
               threat: bool = True, title: str = "") -> np.ndarray:
    """The picture of one frame as ``[height, width, 3]`` uint8.

    Args:
        frame: the frame's arrays (see the module docstring).
        view: the part of the plane shown.
        config: the sim config (missile tables for the threat regions, arena).
        fighter_tracks: per side, past positions ``[K, 2]`` (m) ending at this frame.
        missile_tracks: (side, past positions ``[K, 2]``) of every missile to trace.
        threat: draw the threat regions.
        title: text at the top (the time is added).
    """
    Image = require_pillow("drawing a frame")
    from PIL import ImageDraw

    img = Image.new("RGB", (view.width, view.height), BACKGROUND)
    draw = ImageDraw.Draw(img)
    _grid(draw, view)
    if threat:
        regions = threat_regions(frame, config)
        for s, pts in enumerate(regions):
            if pts is None:
                continue
            col, row = view.to_px(pts[:, 0], pts[:, 1])
            poly = list(zip(col.tolist(), row.tolist(), strict=True))
            # A translucent fill: paste the colour through a mask holding its opacity (one C
            # call, several times faster than compositing an RGBA overlay).
            mask = Image.new("L", img.size, 0)
            ImageDraw.Draw(mask).polygon(poly, fill=THREAT_FILLS[s][3])
            img.paste(THREAT_FILLS[s][:3], mask=mask)
            draw.line([*poly, poly[0]], fill=SIDE_COLORS[s], width=1)
    for s, path in enumerate(fighter_tracks or ()):
        if len(path) > 1:
            col, row = view.to_px(path[:, 0], path[:, 1])
            draw.line(list(zip(col.tolist(), row.tolist(), strict=True)), fill=SIDE_COLORS[s], width=2)
    for s, path in missile_tracks:
        if len(path) > 1:
            col, row = view.to_px(path[:, 0], path[:, 1])
            draw.line(list(zip(col.tolist(), row.tolist(), strict=True)), fill=MISSILE_COLORS[s], width=1)
    _missiles(draw, view, frame)
    _fighters(draw, view, frame)
    _scale_bar(draw, view)
    text = f"t = {float(frame['t_s']):6.1f} s"
    draw.text((8, 6), f"{title}  {text}" if title else text, fill=INK)
    ammo = frame["f_ammo"]
    draw.text((8, 20), f"red missiles {int(ammo[0])}  blue missiles {int(ammo[1])}", fill=INK)
    return np.asarray(img, dtype=np.uint8)


def _grid(draw: Any, view: View, step_m: float = 10_000.0) -> None:
    half_w, half_h = view.width / 2 * view.m_per_px, view.height / 2 * view.m_per_px
    if max(half_w, half_h) / step_m > 40:
        step_m = _nice_length(max(half_w, half_h) / 5)
    x0 = math.floor((view.center_x_m - half_w) / step_m) * step_m
    y0 = math.floor((view.center_y_m - half_h) / step_m) * step_m
    x = x0
    while x <= view.center_x_m + half_w:
        c, _ = view.to_px(np.array(x), np.array(0.0))
        draw.line([(float(c), 0), (float(c), view.height)], fill=GRID)
        x += step_m
    y = y0
    while y <= view.center_y_m + half_h:
        _, r = view.to_px(np.array(0.0), np.array(y))
        draw.line([(0, float(r)), (view.width, float(r))], fill=GRID)
        y += step_m


def _scale_bar(draw: Any, view: View) -> None:
    length_m = _nice_length(view.width * view.m_per_px / 5)
    px = length_m / view.m_per_px
    x0, y0 = 12, view.height - 14
    draw.line([(x0, y0), (x0 + px, y0)], fill=INK, width=2)
    for x in (x0, x0 + px):
        draw.line([(x, y0 - 4), (x, y0 + 4)], fill=INK, width=1)
    label = f"{length_m / 1000:g} km"
    draw.text((x0 + px + 6, y0 - 6), label, fill=INK)


def _fighters(draw: Any, view: View, frame: dict[str, np.ndarray]) -> None:
    col, row = view.to_px(frame["f_x"], frame["f_y"])
    for s in (0, 1):
        c, r = float(col[s]), float(row[s])
        if not frame["f_alive"][s]:
            draw.line([(c - 7, r - 7), (c + 7, r + 7)], fill=SIDE_COLORS[s], width=3)
            draw.line([(c - 7, r + 7), (c + 7, r - 7)], fill=SIDE_COLORS[s], width=3)
            continue
        psi = math.atan2(float(frame["f_vy"][s]), float(frame["f_vx"][s]))
        # Screen rows grow downwards: the heading's y flips.
        fx, fy = math.cos(psi), -math.sin(psi)
        nose = (c + 11 * fx, r + 11 * fy)
        left = (c - 7 * fx + 6 * fy, r - 7 * fy - 6 * fx)
        right = (c - 7 * fx - 6 * fy, r - 7 * fy + 6 * fx)
        draw.polygon([nose, left, right], fill=SIDE_COLORS[s], outline=INK)


def _missiles(draw: Any, view: View, frame: dict[str, np.ndarray]) -> None:
    active = frame["m_active"]
    if not active.any():
        return
    col, row = view.to_px(frame["m_x"], frame["m_y"])
    for s, j in zip(*np.nonzero(active), strict=True):
        c, r = float(col[s, j]), float(row[s, j])
        vx, vy = float(frame["m_vx"][s, j]), float(frame["m_vy"][s, j])
        v = math.hypot(vx, vy) or 1.0
        burning = float(frame["m_burn_left_s"][s, j]) > 0
        draw.line([(c, r), (c + 8 * vx / v, r - 8 * vy / v)], fill=MISSILE_COLORS[s], width=2)
        rad = 3
        draw.ellipse([c - rad, r - rad, c + rad, r + rad], fill=(255, 170, 0) if burning else MISSILE_COLORS[s])


class FrameKeeper:
    """Keeps the recent frames of one environment of a live sim for ``render()``, as the sim's
    observer: the last frame of an ended episode stays on show until the env's next ``reset()``.
    """

    def __init__(self, config: SimConfig, env: int, width: int = WIDTH, height: int = HEIGHT) -> None:
        require_pillow('render_mode="rgb_array"')
        self.config, self.env, self.width, self.height = config, env, width, height
        self.frames: deque[dict[str, np.ndarray]] = deque(maxlen=TRAIL_FRAMES)
        self._next_start: dict[str, np.ndarray] | None = None
        self._view: View | None = None

    def decision_end(self, state: SimState, acc: Any) -> None:
        self.frames.append(frame_from_state(state, self.env, self.config))

    def episodes_started(self, state: SimState, mask: torch.Tensor) -> None:
        if bool(mask[self.env]):
            self._next_start = frame_from_state(state, self.env, self.config)

    def begin_episode(self) -> None:
        """The env was reset: show the new episode from its start."""
        if self._next_start is not None:
            self.frames.clear()
            self.frames.append(self._next_start)
            self._next_start = None
            self._view = None

    def render(self) -> np.ndarray:
        """The current picture, ``[height, width, 3]`` uint8."""
        if not self.frames:
            raise RuntimeError("call reset() before render()")
        frame = self.frames[-1]
        xs = np.concatenate([frame["f_x"], frame["m_x"][frame["m_active"]]])
        ys = np.concatenate([frame["f_y"], frame["m_y"][frame["m_active"]]])
        # Keep the view while everything stays well inside it, so a video does not jitter.
        if self._view is None or not self._view.holds(xs, ys):
            self._view = fit_view(xs, ys, self.width, self.height, min_span_m=40_000.0)
        tracks = [np.stack([[f["f_x"][s], f["f_y"][s]] for f in self.frames]) for s in (0, 1)]
        return draw_frame(frame, self._view, self.config, fighter_tracks=tracks,
                          missile_tracks=self._missile_tracks())

    def _missile_tracks(self) -> list[tuple[int, np.ndarray]]:
        """Each missile in flight: its positions since launch (the frames it was active in)."""
        frame = self.frames[-1]
        out = []
        for s, j in zip(*np.nonzero(frame["m_active"]), strict=True):
            points: list[tuple[float, float, float]] = []
            for f in reversed(self.frames):
                if not f["m_active"][s, j] or (points and f["m_burn_left_s"][s, j] < points[-1][2]):
                    break
                points.append((float(f["m_x"][s, j]), float(f["m_y"][s, j]), float(f["m_burn_left_s"][s, j])))
            out.append((int(s), np.array([p[:2] for p in reversed(points)], dtype=np.float64)))
        return out
