"""The web server of ``python -m pipeline.play``: the page, its WebSocket and the fight's clock.

aiohttp on the project's event loop (uvloop). Routes: ``/`` the page, ``/static/`` its files,
``/ws`` the WebSocket (messages: :mod:`pipeline.play.protocol` and docs/play.md),
``/state.json`` the latest state and ``/stats.json`` the clock's counters (for tests and
bench/play.py). Every viewer has its own sender that always sends the newest frame, so a slow
viewer skips frames and never holds the fight back.
"""

from __future__ import annotations

import asyncio
import importlib
import ipaddress
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from agents.champions import CHAMPIONS
from agents.registry import SCRIPTED
from core.command import squeezed
from pipeline.play.follow import Follower
from pipeline.play.protocol import MAX_MESSAGE_BYTES, Message, ProtocolError, parse_message
from pipeline.play.replay_routes import ReplayService
from pipeline.play.seats import SIDES, build_seat
from pipeline.play.session import PLAY_STEP_S, SCENARIOS, Lineup, Session, SessionView, build_lineup

STATIC_DIR = Path(__file__).with_name("static")
"""The page's files: index.html, cockpit.js, style.css (and spacetime.js when present)."""

log = logging.getLogger(__name__)

Hook = Callable[[SessionView, str], dict[str, Any] | None]


def spacetime_hook() -> Hook | None:
    """``pipeline.play.spacetime.payload`` when that module is there, else None."""
    try:
        module = importlib.import_module("pipeline.play.spacetime")
    except ImportError:
        return None
    hook = getattr(module, "payload", None)
    return hook if callable(hook) else None


def one_line(exc: BaseException) -> str:
    """An exception as one line: its message, or its type where it has none; a type other
    than ``ValueError`` (a failing plug-in) is named."""
    text = squeezed(exc) or type(exc).__name__
    return text if isinstance(exc, ValueError) else f"{type(exc).__name__}: {text}"


def is_local(remote: str | None) -> bool:
    """Whether a peer address is this machine's loopback."""
    try:
        return remote is not None and ipaddress.ip_address(remote.split("%")[0]).is_loopback
    except ValueError:
        return False


@dataclass(eq=False)
class Viewer:
    """One connected page: the seats it flies, the messages it must get (replies, results) and
    the newest state waiting to be sent."""

    ws: web.WebSocketResponse
    local: bool
    held: set[str] = field(default_factory=set)
    perspective: str = "red"
    pending: str | None = None
    outbox: list[str] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, text: str) -> None:
        """Make the state ``text`` the next one sent (replacing one not sent yet)."""
        self.pending = text
        self.wake.set()

    def post(self, message: dict[str, Any]) -> None:
        """Send ``message`` (after those posted before it, ahead of the waiting state)."""
        self.outbox.append(json.dumps(message))
        self.wake.set()


class PlayServer:
    """The fight and everyone watching it."""

    def __init__(self, session: Session, seed: int = 0, max_time_s: float | None = None,
                 follower: Follower | None = None, hook: Hook | None = None,
                 replays: ReplayService | None = None) -> None:
        self.session = session
        self.replays = replays if replays is not None else ReplayService()
        self.seed = seed
        self.max_time_s = max_time_s
        self.follower = follower
        self.hook = hook
        self.viewers: list[Viewer] = []
        self.started_specs = set(session.lineup.specs)
        self.latest: dict[str, str] = {}
        self.late_steps = 0
        self.started_at = time.monotonic()
        self._choosing = False

    # ------------------------------------------------------------------ app

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/state.json", self._state_json)
        app.router.add_get("/stats.json", self._stats_json)
        app.router.add_static("/static/", STATIC_DIR)
        self.replays.add_routes(app)
        app.on_startup.append(self._start_tasks)
        app.on_cleanup.append(self._stop_tasks)
        return app

    async def _start_tasks(self, app: web.Application) -> None:
        self._tasks = [asyncio.create_task(self._clock())]
        if self.follower is not None:
            self._tasks.append(asyncio.create_task(self._follow()))

    async def _stop_tasks(self, app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        for viewer in list(self.viewers):
            await viewer.ws.close()

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def _state_json(self, request: web.Request) -> web.Response:
        return web.Response(text=self.latest.get("red", "{}"), content_type="application/json")

    async def _stats_json(self, request: web.Request) -> web.Response:
        s = self.session
        return web.json_response({"steps": s.steps, "sim_s": round(s.sim_s, 3), "viewers": len(self.viewers),
                                  "late_steps": self.late_steps, "paused": s.paused, "time_scale": s.time_scale,
                                  "wall_s": round(time.monotonic() - self.started_at, 3)})

    # ------------------------------------------------------------------ clock

    async def _clock(self) -> None:
        """Step the fight in real time (times the time scale) and send each frame."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            was_over = self.session.result is not None
            try:
                self.session.step()
            except Exception as exc:  # an agent may be any plug-in: its failure pauses the fight
                self.session.paused = True
                self._error_all(f"error: the fight is paused: {one_line(exc)} (choose another fight)")
            if self.session.result is not None and not was_over:
                self._post_all(self.session.result)
            self._publish()
            next_at += PLAY_STEP_S / self.session.time_scale
            delay = next_at - loop.time()
            if delay < -PLAY_STEP_S:  # fell more than a step behind: count it, do not sprint
                self.late_steps += 1
                next_at = loop.time()
            await asyncio.sleep(max(delay, 0.0))

    def _publish(self) -> None:
        frame = self.session.frame()
        frame["events"] = self.session.take_events()
        view = self.session.view() if self.hook is not None else None
        texts: dict[str, str] = {}
        for side in SIDES:
            if side != "red" and not any(v.perspective == side for v in self.viewers):
                continue
            message = dict(frame, hud=self._hud(frame, side), spacetime=None)
            if view is not None and self.hook is not None:
                try:
                    extra = self.hook(view, side) or {}
                except Exception as exc:  # the graph is an extra: the fight goes on without it
                    self.hook = None
                    self._error_all(f"error: the spacetime graph is off: {one_line(exc)}")
                    extra = {}
                message["spacetime"] = extra.get("spacetime")
                message["hud"].update(extra.get("hud") or {})
            texts[side] = json.dumps(message)
        self.latest = texts
        for viewer in self.viewers:
            viewer.offer(texts.get(viewer.perspective, texts["red"]))

    @staticmethod
    def _hud(frame: dict[str, Any], side: str) -> dict[str, Any]:
        own = frame["fighters"][SIDES.index(side)]
        return {"seat": side, "speed": own["speed"], "missiles_left": own["missiles_left"],
                "fire_ready": own["fire_ready"], "alive": own["alive"]}

    def _post_all(self, message: dict[str, Any]) -> None:
        for viewer in self.viewers:
            viewer.post(message)

    # ------------------------------------------------------------------ follow

    async def _follow(self) -> None:
        """Fly each new checkpoint of the followed run from the next round on."""
        follower = self.follower
        assert follower is not None
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(follower.poll_s)
            path = follower.poll()
            if path is None:
                continue
            side = SIDES.index(follower.side)
            config = self.session.lineup.config
            decide_every = follower.decide_every
            try:
                seat = await loop.run_in_executor(None, build_seat, str(path), side, config, decide_every, self.seed)
            except (ValueError, RuntimeError, OSError) as exc:
                follower.failed(path)
                self._error_all(f"error: --follow: {one_line(exc)} (still flying {follower.current})")
                continue
            follower.loaded(path)
            self.session.queue_seat(side, str(path), seat)
            log.info("following %s: %s flies from the next round", follower.run, path)

    # ------------------------------------------------------------------ viewers

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=16 * MAX_MESSAGE_BYTES, heartbeat=20.0)
        await ws.prepare(request)
        viewer = Viewer(ws, is_local(request.remote))
        self.viewers.append(viewer)
        sender = asyncio.create_task(self._sender(viewer))
        try:
            viewer.post(self._hello(viewer))
            self.replays.greet(viewer)
            if self.latest:
                viewer.offer(self.latest.get("red", ""))
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    await self._receive(viewer, msg.data)
                elif msg.type == WSMsgType.BINARY:
                    self._reply_error(viewer, "error: binary messages are not taken: send JSON text")
                elif msg.type == WSMsgType.ERROR:
                    break
        finally:
            self.viewers.remove(viewer)
            sender.cancel()
            for side in viewer.held:  # nobody at the controls: fly straight on
                seat = self.session.human_seat(side)
                if seat is not None:
                    seat.reset()
        return ws

    @staticmethod
    async def _sender(viewer: Viewer) -> None:
        """Send the viewer's messages, then its newest state, whenever there are some."""
        while not viewer.ws.closed:
            await viewer.wake.wait()
            viewer.wake.clear()
            texts, viewer.outbox = viewer.outbox, []
            if viewer.pending:
                texts.append(viewer.pending)
                viewer.pending = None
            try:
                for text in texts:
                    await viewer.ws.send_str(text)
            except (ConnectionError, RuntimeError):
                return

    def _hello(self, viewer: Viewer) -> dict[str, Any]:
        cfg = self.session.lineup.config
        return {"type": "hello", "step_s": PLAY_STEP_S, "arena_half_width_m": cfg.arena_half_width_m,
                "scenarios": list(SCENARIOS), "agents": ["human", *SCRIPTED, *CHAMPIONS],
                "lineup": {"red": self.session.lineup.specs[0], "blue": self.session.lineup.specs[1],
                           "scenario": self.session.lineup.scenario},
                "choose_any": viewer.local, "held": sorted(viewer.held)}

    @staticmethod
    def _reply_error(viewer: Viewer, text: str) -> None:
        log.warning("%s", text)
        viewer.post({"type": "error", "message": text})

    def _error_all(self, text: str) -> None:
        log.warning("%s", text)
        self._post_all({"type": "error", "message": text})

    async def _receive(self, viewer: Viewer, text: str) -> None:
        try:
            message = parse_message(text)
            await self._act(viewer, message)
        except ProtocolError as exc:
            self._reply_error(viewer, f"error: {exc}")

    async def _act(self, viewer: Viewer, message: Message) -> None:
        f, session = message.fields, self.session
        if message.type == "input":
            seat = session.human_seat(f["seat"])
            if seat is None:
                raise ProtocolError(f"seat {f['seat']} is flown by {session.lineup.specs[SIDES.index(f['seat'])]}, not by a person")
            if f["seat"] not in viewer.held:
                raise ProtocolError(f"seat {f['seat']} is not yours: take it first (take_seat)")
            c = seat.controls
            c.rudder, c.throttle, c.fire, c.seq = f["rudder"], f["throttle"], f["fire"], f["seq"]
        elif message.type == "control":
            action = f["action"]
            if action in ("pause", "resume"):
                session.paused = action == "pause"
            elif action == "restart":
                session.restart()
            else:
                session.time_scale = f["value"]
        elif message.type == "take_seat":
            await self._take_seat(viewer, f["seat"])
        elif message.type == "choose":
            await self._choose(viewer, f["red"], f["blue"], f["scenario"])
        elif message.type == "seek":
            await self.replays.seek(viewer, f)

    def _holder(self, side: str) -> Viewer | None:
        return next((v for v in self.viewers if side in v.held), None)

    async def _take_seat(self, viewer: Viewer, seat: str) -> None:
        humans = [s for s in SIDES if self.session.human_seat(s) is not None]
        if seat == "none":
            viewer.held.clear()
        elif seat == "auto":
            viewer.held |= {s for s in humans if self._holder(s) in (None, viewer)}
        else:
            if seat not in humans:
                raise ProtocolError(f"seat {seat} is flown by {self.session.lineup.specs[SIDES.index(seat)]}, not by a person")
            holder = self._holder(seat)
            if holder is not None and holder is not viewer:
                raise ProtocolError(f"seat {seat} is taken by another viewer")
            viewer.held.add(seat)
        viewer.perspective = sorted(viewer.held, key=SIDES.index)[0] if viewer.held else "red"
        viewer.post({"type": "seats", "held": sorted(viewer.held, key=SIDES.index)})

    async def _choose(self, viewer: Viewer, red: str, blue: str, scenario: str) -> None:
        if not viewer.local:
            allowed = {"human", *SCRIPTED, *CHAMPIONS, *self.started_specs}
            for spec in (red, blue):
                if spec not in allowed:
                    raise ProtocolError(f"agent {spec!r} refused: a viewer on another machine may choose "
                                        f"{', '.join(sorted(allowed))}")
        if self._choosing:
            raise ProtocolError("a new fight is being set up already; wait for it")
        self._choosing = True
        try:
            loop = asyncio.get_running_loop()
            lineup: Lineup = await loop.run_in_executor(None, build_lineup, red, blue, scenario, self.seed, self.max_time_s)
        except Exception as exc:  # a plug-in agent's constructor may raise anything
            raise ProtocolError(one_line(exc)) from None
        finally:
            self._choosing = False
        self.session.apply(lineup)
        for other in self.viewers:
            other.held = {s for s in other.held if self.session.human_seat(s) is not None}
        for other in self.viewers:
            other.post(self._hello(other))
