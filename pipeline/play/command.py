"""``python -m pipeline.play``: serve the cockpit page and run the fight until Ctrl-C.

``--red SPEC --blue SPEC`` (``human`` or any agent spec: a scripted name, a checkpoint file,
folder or run directory, a league snapshot, ``package.module:Class``), ``--scenario``,
``--follow RUN`` (fly the newest checkpoint of a training run, switching to each new one),
``--replay FILE`` (open a recorded fight in the page, :mod:`pipeline.play.replays`),
``--host`` / ``--port``. A bad spec or option is one line on stderr and exit status 2, before
anything is served.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import TYPE_CHECKING

import torch

from core.command import CommandParser, run_command
from monitoring.exporter import open_to_network
from pipeline.play.follow import Follower
from pipeline.play.replay_routes import ReplayService
from pipeline.play.seats import HUMAN, SIDES
from pipeline.play.session import DEFAULT_OPPONENT, SCENARIOS, Session, build_lineup

if TYPE_CHECKING:
    from pipeline.play.server import PlayServer

DEFAULT_HOST = "127.0.0.1"
"""Loopback by default: nobody else reaches the page unless ``--host`` says so."""
DEFAULT_PORT = 8765
"""The page's port (a busy one falls back to the next free one)."""


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="python -m pipeline.play",
                      description="Fly the duel in a browser, or watch two agents fight live.")
    p.add_argument("--red", metavar="SPEC", help=f"who flies red: {HUMAN} (default) or an agent spec")
    p.add_argument("--blue", metavar="SPEC", help=f"who flies blue: an agent spec (default {DEFAULT_OPPONENT}) or {HUMAN}")
    p.add_argument("--scenario", default="random", choices=SCENARIOS, help="starting positions (default random)")
    p.add_argument("--follow", metavar="RUN", help="fly the newest checkpoint of the training run RUN, "
                   "switching to each new one from the next round")
    p.add_argument("--follow-seat", default="blue", choices=SIDES, help="the seat --follow flies (default blue)")
    p.add_argument("--max-time", type=float, metavar="SECONDS", help="a round's time limit in sim seconds "
                   "(default: the simulator's)")
    p.add_argument("--seed", type=int, default=0, help="seed of the starting positions and of the agents")
    p.add_argument("--replay", metavar="FILE", help="open the recorded fight FILE in the page: timeline, "
                   "play, pause, speed, stepping, the spacetime graph of each moment (the live fight starts "
                   "paused)")
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST}; "
                   "0.0.0.0 shares the page with the network)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free port)")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be in 0..65535, got {args.port}")
    if args.max_time is not None and not 0 < args.max_time <= 1e6:
        raise ValueError(f"--max-time must be a number of seconds in (0, 1e6], got {args.max_time}")
    try:
        from pipeline.play.server import PlayServer, spacetime_hook
    except ImportError as exc:
        raise ValueError(f"python -m pipeline.play needs {exc.name or 'aiohttp'}: pip install -e '.[play]'") from None
    torch.set_num_threads(1)
    if args.follow is not None and getattr(args, args.follow_seat) is not None:
        raise ValueError(f"--follow flies the {args.follow_seat} seat: drop --{args.follow_seat}, "
                         f"or pass --follow-seat {'blue' if args.follow_seat == 'red' else 'red'}")
    specs = {"red": args.red or HUMAN, "blue": args.blue or DEFAULT_OPPONENT}
    follower = None
    if args.follow is not None:
        follower = Follower(args.follow, args.follow_seat)
        specs[args.follow_seat] = str(follower.current)
    lineup = build_lineup(specs["red"], specs["blue"], args.scenario, args.seed, args.max_time)
    if follower is not None:
        seat = lineup.seats[SIDES.index(args.follow_seat)]
        follower.decide_every = getattr(seat, "decide_every", 1)
    session = Session(lineup, seed=args.seed)
    replays = ReplayService()
    if args.replay is not None:
        replays.opening = replays.shelf.open_path(args.replay)
        session.paused = True
    server = PlayServer(session, seed=args.seed, max_time_s=args.max_time, follower=follower, hook=spacetime_hook(),
                        replays=replays)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("aiohttp").setLevel(logging.ERROR)
    _run(serve(server, args.host, args.port, specs))


async def serve(server: PlayServer, host: str, port: int, specs: dict[str, str]) -> None:
    """Serve until SIGINT or SIGTERM."""
    from pipeline.play.site import start_site

    runner, taken = await start_site(server.app(), host, port)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{taken}/"
    print(f"cockpit: {url}  (red: {specs['red']}, blue: {specs['blue']}; Ctrl-C stops)", flush=True)
    if server.replays.opening is not None:
        info = server.replays.opening.info()
        print(f"  replay: {info['file']} ({info['agents']['red']} vs {info['agents']['blue']}, "
              f"{info['duration']:.1f} s, {info['frames']} frames)", flush=True)
    if all(spec == HUMAN for spec in specs.values()):
        print(f"  one keyboard: {url}  two browsers: {url}?seat=red and {url}?seat=blue", flush=True)
    if open_to_network(host):
        print(f"warning: the page on {host}:{taken} is open to the network: anyone who reaches it can watch "
              "and fly the fight", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def _run(coro: object) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        asyncio.run(coro)  # type: ignore[arg-type]
        return
    uvloop.run(coro)  # type: ignore[arg-type]


def run(argv: list[str] | None = None) -> None:
    """The command line: bad input (a spec, an option, a port range all busy) exits 2 with one
    line on stderr."""
    run_command(main, argv)
