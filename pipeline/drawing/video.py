"""``python -m pipeline.replay FILE --gif OUT`` / ``--mp4 OUT``: the fight animated.

Every picture is :func:`sim.envs.render.draw_frame`, the drawing of ``render_mode="rgb_array"``:
the fighters and their tracks so far, the missiles in flight and their tracks, and each side's
current threat region. One view (fitted to the whole fight) holds for the whole animation.
GIFs are written with Pillow, MP4s (H.264) with the ffmpeg that ``imageio-ffmpeg`` ships, frame
by frame, so a long fight is never held whole in memory for an MP4. Both are in the ``viz``
extra; each is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from core.files import atomic_path, atomic_write
from sim.config import SimConfig
from sim.envs.render import View, draw_frame, fit_view, require_pillow
from sim.replay.format import Replay

MAX_GIF_FRAMES = 400
"""A GIF keeps every picture in memory until written: longer fights are shown every k-th frame."""


def require_ffmpeg() -> str:
    """The path of an ffmpeg executable, or an ``ImportError`` saying how to get one."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise ImportError("--mp4 needs an H.264 encoder: pip install 'midrange-rl[viz]' "
                          "(imageio-ffmpeg ships ffmpeg)") from None
    try:
        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except RuntimeError as exc:
        raise ImportError(f"--mp4: no ffmpeg found ({exc})") from None


def replay_config(replay: Replay) -> SimConfig:
    """The sim config the replay was recorded with (fields this version does not know, from a
    newer writer, are left out)."""
    known = {f.name for f in dataclasses.fields(SimConfig)}
    return SimConfig.from_dict({k: v for k, v in dict(replay.header["sim_config"]).items() if k in known})


def whole_view(replay: Replay, width: int, height: int) -> View:
    """The view that holds every fighter and missile position of the fight."""
    a = replay.arrays
    xs = [a["f_x"].ravel(), a["m_x"][a["m_active"]]]
    ys = [a["f_y"].ravel(), a["m_y"][a["m_active"]]]
    return fit_view(np.concatenate(xs), np.concatenate(ys), width, height, margin=0.08)


def pictures(replay: Replay, width: int, height: int, every: int = 1,
             threat: bool = True) -> Iterator[np.ndarray]:
    """The animation's pictures, ``[height, width, 3]`` uint8, one per ``every`` frames (the
    last frame always included)."""
    config = replay_config(replay)
    view = whole_view(replay, width, height)
    a = replay.arrays
    paths = replay.missile_paths()
    agents = replay.header.get("agents", {})
    title = f"red {agents.get('red', '?')} vs blue {agents.get('blue', '?')}"
    n = replay.num_frames
    shown = list(range(0, n, every))
    if shown[-1] != n - 1:
        shown.append(n - 1)
    for i in shown:
        tracks = [np.stack([a["f_x"][: i + 1, s], a["f_y"][: i + 1, s]], axis=1) for s in (0, 1)]
        missiles = []
        for m in paths:
            k = int(np.searchsorted(m.frames, i, side="right"))
            if k > 1 and (i <= m.frames[-1] or not m.lost):
                missiles.append((m.side, np.stack([m.x[:k], m.y[:k]], axis=1)))
        yield draw_frame(replay.frame(i), view, config, fighter_tracks=tracks,
                         missile_tracks=missiles, threat=threat, title=title)


def frame_stride(replay: Replay, fps: float, speed: float) -> int:
    """Frames of the replay per picture for ``speed`` sim seconds per video second."""
    dt = float(replay.header.get("decision_dt_s", 0.5))
    return max(round(speed / (fps * dt)), 1)


def write_gif(replay: Replay, path: Path, fps: float = 20.0, speed: float = 10.0,
              size: tuple[int, int] = (640, 480)) -> int:
    """Animate ``replay`` into a GIF; returns the number of pictures."""
    Image = require_pillow("--gif")
    every = frame_stride(replay, fps, speed)
    every = max(every, -(-replay.num_frames // MAX_GIF_FRAMES))
    images = [Image.fromarray(p).quantize(colors=64) for p in pictures(replay, *size, every=every)]
    with atomic_write(path) as out:
        images[0].save(out, format="GIF", save_all=True, append_images=images[1:],
                       duration=round(1000 / fps), loop=0)
    return len(images)


def write_mp4(replay: Replay, path: Path, fps: float = 20.0, speed: float = 10.0,
              size: tuple[int, int] = (640, 480)) -> int:
    """Animate ``replay`` into an H.264 MP4, streamed frame by frame; returns the pictures."""
    require_ffmpeg()
    import imageio_ffmpeg

    every = frame_stride(replay, fps, speed)
    count = 0
    with atomic_path(path) as tmp:  # ffmpeg writes the file by name
        writer = imageio_ffmpeg.write_frames(str(tmp), size, fps=fps, codec="libx264", pix_fmt_out="yuv420p",
                                             output_params=["-f", "mp4"], macro_block_size=16)
        try:
            writer.send(None)
            for picture in pictures(replay, *size, every=every):
                writer.send(np.ascontiguousarray(picture))
                count += 1
        finally:
            writer.close()
    return count
