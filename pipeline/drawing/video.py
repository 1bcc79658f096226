"""``python -m pipeline.replay FILE --gif OUT`` / ``--mp4 OUT``: the fight animated.

Every picture is :func:`sim.envs.render.draw_frame`, the drawing of ``render_mode="rgb_array"``:
the fighters and their tracks so far, the missiles in flight and their tracks, and each side's
current threat region. One view (fitted to the whole fight) holds for the whole animation.
GIFs are written with Pillow, MP4s (H.264) with the ffmpeg that ``imageio-ffmpeg`` ships; both
are drawn picture by picture as the encoder takes them. ffmpeg streams, so a long fight is never
held whole in memory for an MP4; Pillow keeps a GIF's pictures until it writes, so a GIF shows at
most :data:`MAX_GIF_FRAMES` pictures taking :data:`MAX_GIF_BYTES` (every k-th frame of a longer
fight, fewer for larger pictures). Both are in the ``viz`` extra; each is written under a
temporary name and renamed when complete.
"""

from __future__ import annotations

import contextlib
import errno
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from core.files import atomic_path, atomic_write
from sim.envs.render import View, draw_frame, fit_view, require_pillow
from sim.replay.format import Replay

MAX_GIF_FRAMES = 400
"""A GIF keeps every picture in memory until written: longer fights are shown every k-th frame."""
MAX_GIF_BYTES = 128 << 20
"""... and the pictures it keeps take at most this many bytes (one byte per pixel each), so a
large picture size shows fewer of them."""


def gif_picture_limit(width: int, height: int) -> int:
    """The most pictures a GIF of this size keeps: :data:`MAX_GIF_FRAMES`, fewer when they would
    take more than :data:`MAX_GIF_BYTES`."""
    return max(min(MAX_GIF_FRAMES, MAX_GIF_BYTES // (width * height)), 2)


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
    config = replay.config
    view = whole_view(replay, width, height)
    a = replay.arrays
    paths = replay.missile_paths()
    title = f"red {replay.agent('red')} vs blue {replay.agent('blue')}"
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
    return max(round(speed / (fps * replay.config.decision_dt_s)), 1)


def write_gif(replay: Replay, path: Path, fps: float = 20.0, speed: float = 10.0,
              size: tuple[int, int] = (640, 480)) -> int:
    """Animate ``replay`` into a GIF; returns the number of pictures. Each picture is drawn and
    quantized as the encoder asks for it; the encoder keeps them all until it writes
    (:func:`gif_picture_limit`)."""
    Image = require_pillow("--gif")
    every = frame_stride(replay, fps, speed)
    # At most limit - 1 pictures every k-th frame, and the last frame.
    every = max(every, -(-replay.num_frames // (gif_picture_limit(*size) - 1)))
    count = 0

    def images() -> Iterator[Any]:
        nonlocal count
        for picture in pictures(replay, *size, every=every):
            count += 1
            yield Image.fromarray(picture).quantize(colors=64)

    stream = images()
    first = next(stream)
    with atomic_write(path) as out:
        first.save(out, format="GIF", save_all=True, append_images=stream, duration=round(1000 / fps), loop=0)
    return count


def write_mp4(replay: Replay, path: Path, fps: float = 20.0, speed: float = 10.0,
              size: tuple[int, int] = (640, 480)) -> int:
    """Animate ``replay`` into an H.264 MP4, streamed frame by frame; returns the pictures. A
    failed encoder (a full disk) leaves no file and raises ``OSError`` naming ``path`` with
    ffmpeg's last message (its log is kept nowhere: the last line says what failed)."""
    every = frame_stride(replay, fps, speed)
    count = 0
    with atomic_path(path) as tmp, tempfile.TemporaryFile() as log:  # ffmpeg writes the file by name
        encoder = subprocess.Popen(ffmpeg_command(tmp, size, fps), stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=log)
        assert encoder.stdin is not None
        try:
            for picture in pictures(replay, *size, every=every):
                encoder.stdin.write(np.ascontiguousarray(picture).tobytes())
                count += 1
            encoder.stdin.close()
        except BrokenPipeError:
            pass  # ffmpeg has stopped: its status and log say why
        finally:
            if encoder.poll() is None and not encoder.stdin.closed:
                with contextlib.suppress(OSError):
                    encoder.stdin.close()
            status = encoder.wait()
        if status != 0:
            log.seek(0)
            raise ffmpeg_error(status, log.read().decode("utf-8", "replace"), path)
    return count


def ffmpeg_command(output: Path, size: tuple[int, int], fps: float) -> list[str]:
    """ffmpeg reading raw RGB pictures of ``size`` on its standard input and writing H.264 into
    ``output`` (a size that is no multiple of 16 is scaled up to one, as players want)."""
    w, h = size
    cmd = [require_ffmpeg(), "-y", "-f", "rawvideo", "-vcodec", "rawvideo", "-s", f"{w}x{h}",
           "-pix_fmt", "rgb24", "-r", f"{fps:.02f}", "-i", "-", "-an", "-vcodec", "libx264",
           "-pix_fmt", "yuv420p"]
    if w % 16 or h % 16:
        cmd += ["-vf", f"scale={-(-w // 16) * 16}:{-(-h // 16) * 16}"]
    return [*cmd, "-v", "error", "-f", "mp4", str(output)]


def ffmpeg_error(status: int, log: str, path: Path) -> OSError:
    """The error of a failed ffmpeg: exit ``status`` and the last line of its ``log`` (without
    the ``[muxer @ 0x...]`` prefix); ``ENOSPC`` when it ran out of space."""
    lines = [re.sub(r"^\[[^\]]*\]\s*", "", line).strip() for line in log.splitlines()]
    last = next((line for line in reversed(lines) if line), "no message")
    code = errno.ENOSPC if "no space left on device" in log.lower() else errno.EIO
    return OSError(code, f"ffmpeg exited with status {status}: {' '.join(last.split())[:200]}", str(path))
