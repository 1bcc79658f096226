"""``python -m pipeline.replay FILE [--png OUT] [--gif OUT] [--mp4 OUT] [--acmi OUT]``: look at a
recorded fight (a replay written by ``pipeline.evaluate --record`` or a run's end-of-run
evaluation into ``RUN/replays/``; format: :mod:`sim.replay.format`).

Without an output option it prints the replay's header, outcome and events. Any number of
outputs may be asked for in one call:

- ``--png OUT``: the whole fight on one top-down picture (:mod:`pipeline.drawing.png`);
- ``--gif OUT`` / ``--mp4 OUT``: the fight animated with the ``render_mode`` drawing, threat
  regions included (:mod:`pipeline.drawing.video`; ``--fps``, ``--speed``, ``--size``);
- ``--acmi OUT``: Tacview's text ACMI 2.2 (:mod:`pipeline.drawing.acmi`);
- ``--spacetime OUT``: the spacetime graph at one moment (``--at SECONDS``, default the first
  launch; ``--own red|blue``), 3-D and from above (:mod:`pipeline.drawing.spacetime`).

Every output is one row of :data:`OUTPUTS` (its flag, what it needs installed, the function that
writes it, and any options of its own), so a new kind of output is one more row. The replay is
read and every output's packages are checked before anything is written; a bad file or a
missing package is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.command import CommandParser, run_command
from pipeline.drawing.report import say
from sim.replay.episode import printable
from sim.replay.format import Replay, ReplayError, load_replay


@dataclass(frozen=True)
class Output:
    """One kind of output of ``python -m pipeline.replay``."""

    flag: str
    """The option that asks for it, e.g. ``--png``; its value is the output path."""
    help: str
    requires: tuple[tuple[str, str], ...]
    """(module, install hint) pairs that must be importable."""
    write: Callable[[Replay, Path, argparse.Namespace], str]
    """Writes the output; returns a short description of what it wrote."""
    add_options: Callable[[argparse.ArgumentParser], None] | None = None
    """Adds the options only this output reads (e.g. ``--fps``)."""

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


VIZ = "pip install 'midrange-rl[viz]'"


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 640x480, got {text!r}") from None
    if not (16 <= w <= 4096 and 16 <= h <= 4096) or w % 2 or h % 2:
        raise argparse.ArgumentTypeError(f"size must be even and within 16..4096 pixels, got {text!r}")
    return w, h


def _video_options(p: argparse.ArgumentParser) -> None:
    if any(a.dest == "fps" for a in p._actions):
        return  # shared by --gif and --mp4
    p.add_argument("--fps", type=float, default=20.0, help="animation: pictures per second (default 20)")
    p.add_argument("--speed", type=float, default=10.0,
                   help="animation: sim seconds per second of video (default 10)")
    p.add_argument("--size", type=_size, default=(640, 480), metavar="WxH",
                   help="animation: picture size (default 640x480)")


def _png(replay: Replay, path: Path, args: argparse.Namespace) -> str:
    from pipeline.drawing.png import write_png

    write_png(replay, path)
    return "top-down picture"


def _gif(replay: Replay, path: Path, args: argparse.Namespace) -> str:
    from pipeline.drawing.video import write_gif

    n = write_gif(replay, path, fps=args.fps, speed=args.speed, size=args.size)
    return f"animation, {n} pictures"


def _mp4(replay: Replay, path: Path, args: argparse.Namespace) -> str:
    from pipeline.drawing.video import require_ffmpeg, write_mp4

    require_ffmpeg()
    n = write_mp4(replay, path, fps=args.fps, speed=args.speed, size=args.size)
    return f"video, {n} pictures"


def _acmi(replay: Replay, path: Path, args: argparse.Namespace) -> str:
    from pipeline.drawing.acmi import write_acmi

    write_acmi(replay, path)
    return "Tacview ACMI 2.2"


def _spacetime_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--at", type=float, default=None, metavar="SECONDS",
                   help="spacetime graph: the moment, s of sim time (default: the first launch)")
    p.add_argument("--own", choices=("red", "blue"), default="red",
                   help="spacetime graph: the fighter it is seen from (default red)")


def _spacetime(replay: Replay, path: Path, args: argparse.Namespace) -> str:
    from pipeline.drawing.spacetime import write_spacetime

    state = write_spacetime(replay, path, at_s=args.at, own=0 if args.own == "red" else 1)
    return f"spacetime graph at {state.t_s:.1f} s seen from {args.own}"


OUTPUTS: tuple[Output, ...] = (
    Output("--png", "top-down tracks, markers, time ticks, scale bar, legend, outcome",
           (("matplotlib", VIZ),), _png),
    Output("--gif", "the fight animated (threat regions drawn)", (("PIL", VIZ),), _gif, _video_options),
    Output("--mp4", "the fight animated, H.264", (("PIL", VIZ), ("imageio_ffmpeg", VIZ)), _mp4,
           _video_options),
    Output("--acmi", "Tacview text ACMI 2.2", (), _acmi),
    Output("--spacetime", "the spacetime graph at --at SECONDS: threat regions, reach, predicted and "
           "flown paths, escape margin", (("matplotlib", VIZ),), _spacetime, _spacetime_options),
)
"""Every output, in the order they are written."""


def build_parser(outputs: tuple[Output, ...] = OUTPUTS) -> argparse.ArgumentParser:
    """The command line of ``python -m pipeline.replay``."""
    # Outputs may declare the same option (an added output may want --at, like the spacetime
    # graph): the last declaration wins instead of a conflict error.
    p = CommandParser(prog="python -m pipeline.replay", description=__doc__.split("\n\n")[0],
                                allow_abbrev=False, conflict_handler="resolve")
    p.add_argument("file", type=Path, help="a replay file (*.replay)")
    for out in outputs:
        p.add_argument(out.flag, type=Path, metavar="OUT", help=out.help)
    for out in outputs:
        if out.add_options is not None:
            out.add_options(p)
    return p


def summary(replay: Replay) -> str:
    """The header, outcome and events as text; what comes from the file is printed with its
    control characters escaped (:func:`sim.replay.episode.printable`)."""
    h = replay.header
    lines = [
        f"{replay.path}: replay format {'.'.join(map(str, h.get('version', [])))}, "
        f"{replay.num_frames} frames, {float(replay.arrays['t_s'][-1]):.1f} s",
        f"red: {replay.agent('red')}  blue: {replay.agent('blue')}  "
        + printable(f"scenario {h.get('scenario')}  seed {h.get('seed')}  env {h.get('env_index')} "
                    f"episode {h.get('episode')}"),
        f"outcome: {printable(str(replay.outcome))}",
        "events:",
    ]
    for e in replay.events:
        rest = ", ".join(f"{k}={v}" for k, v in e.items() if k not in ("t_s", "frame", "kind"))
        lines.append(f"  {float(e['t_s']):7.1f} s  {e['kind']:<13} {printable(rest)}")
    return "\n".join(lines)


MAX_FPS = 120.0
"""The most pictures per second an animation may ask for."""
MAX_SPEED = 10_000.0
"""The most sim seconds per second of video."""
MAX_PIXELS = 4096 * 2160
"""The largest picture (width x height) of an animation: a 4K frame."""


def check_options(args: argparse.Namespace) -> None:
    """Refuse animation options out of range (``ValueError`` naming the option): ``--fps`` in
    (0, :data:`MAX_FPS`], ``--speed`` in (0, :data:`MAX_SPEED`], ``--size`` at most
    :data:`MAX_PIXELS` pixels."""
    for name, high, unit in (("fps", MAX_FPS, "pictures per second"), ("speed", MAX_SPEED, "sim seconds per second")):
        value = getattr(args, name, None)
        if value is not None and not (math.isfinite(value) and 0 < value <= high):
            raise ValueError(f"--{name} must be a number > 0 and at most {high:g} ({unit}), got {value:g}")
    size = getattr(args, "size", None)
    if size is not None and size[0] * size[1] > MAX_PIXELS:
        raise ValueError(f"--size {size[0]}x{size[1]} is too large: at most {MAX_PIXELS} pixels "
                         "(e.g. 4096x2160, 3840x2160)")


def check_requirements(wanted: list[Output]) -> None:
    """Refuse, before any work, an output whose packages are missing (one line per call)."""
    for out in wanted:
        for module, hint in out.requires:
            if importlib.util.find_spec(module) is None:
                raise ImportError(f"{out.flag} needs the Python package {module!r}: {hint}")


def check_output_path(flag: str, path: Path) -> None:
    """An output path must name a file in an existing folder."""
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise ValueError(f"{flag} {path}: the folder {path.parent} does not exist")


def main(argv: list[str] | None = None, outputs: tuple[Output, ...] = OUTPUTS) -> dict[str, Any]:
    """Render the replay as asked; returns ``{flag: path}`` of what was written."""
    args = build_parser(outputs).parse_args(argv)
    check_options(args)
    wanted = [o for o in outputs if getattr(args, o.dest) is not None]
    check_requirements(wanted)
    for out in wanted:
        check_output_path(out.flag, getattr(args, out.dest))
    replay = load_replay(args.file)
    if not wanted:
        say(summary(replay))
    written: dict[str, Any] = {}
    for out in wanted:
        path = getattr(args, out.dest)
        what = out.write(replay, path, args)
        say(f"wrote {path} ({what})")
        written[out.flag] = path
    return written


def run(argv: list[str] | None = None) -> None:
    """Command-line entry: bad input (an unreadable or damaged replay, a missing package, a bad
    output path) is one line on stderr and exit status 2; a failed write is status 1."""
    run_command(main, argv, (ReplayError, ImportError, ValueError))


if __name__ == "__main__":
    run(sys.argv[1:])
