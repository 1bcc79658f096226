"""The server's side of replays in the page (:mod:`pipeline.play.replays` holds the replays).

- ``POST /replay?name=FILE`` with the file's bytes as the body (the page's file chooser or a
  file dropped on it): the replay is read and checked, and the answer is its ``replay_info``
  message, or status 400 with ``{"type": "error", "message": "error: ..."}`` (the one line the
  page shows; it is also logged). At most :data:`~pipeline.play.replays.UPLOAD_LIMIT_BYTES`.
- ``{"type": "seek", "replay": NAME, "t": SECONDS, "seat": "red"|"blue"}`` over the WebSocket:
  the viewer receives the ``state`` message of that moment (:meth:`ReplayFile.state`).
- ``python -m pipeline.play --replay FILE``: every page that connects receives that replay's
  ``replay_info`` after ``hello`` and opens it.

Reading a file and computing a moment's spacetime graph run in a worker thread, so the live
fight's clock is never held up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from aiohttp import web

from pipeline.play.protocol import ProtocolError
from pipeline.play.replays import UPLOAD_LIMIT_BYTES, ReplayFile, ReplayShelf
from sim.replay.format import ReplayError

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 16


class Recipient(Protocol):
    """A connected page (``pipeline.play.server.Viewer``): what it is sent."""

    def post(self, message: dict[str, Any]) -> None: ...


class ReplayService:
    """Replays for the pages of one server: the open ones and the one given on the command line."""

    def __init__(self, shelf: ReplayShelf | None = None, opening: ReplayFile | None = None) -> None:
        self.shelf = shelf if shelf is not None else ReplayShelf()
        self.opening = opening
        """Shown to every page that connects (``--replay FILE``), or None."""

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/replay", self.upload)

    def greet(self, viewer: Recipient) -> None:
        """Open the command line's replay in a page that has just connected."""
        if self.opening is not None:
            viewer.post(self.opening.info())

    async def upload(self, request: web.Request) -> web.Response:
        name = request.query.get("name", "replay")
        size = request.content_length
        if size is not None and size > UPLOAD_LIMIT_BYTES:
            return self._refuse(f"{name}: {size} bytes, more than the {UPLOAD_LIMIT_BYTES >> 20} MiB a replay "
                                "sent to the page may have", 413)
        parts, got = [], 0
        while chunk := await request.content.read(CHUNK_BYTES):
            got += len(chunk)
            if got > UPLOAD_LIMIT_BYTES:
                return self._refuse(f"{name}: more than the {UPLOAD_LIMIT_BYTES >> 20} MiB a replay sent to the "
                                    "page may have", 413)
            parts.append(chunk)
        loop = asyncio.get_running_loop()
        try:
            opened = await loop.run_in_executor(None, self.shelf.open_bytes, b"".join(parts), name)
        except ReplayError as exc:
            return self._refuse(str(exc), 400)
        log.info("replay %s opened in a page (%d frames)", opened.label, opened.info()["frames"])
        return web.json_response(opened.info())

    @staticmethod
    def _refuse(text: str, status: int) -> web.Response:
        line = f"error: {' '.join(text.split())}"
        log.warning("%s", line)
        return web.json_response({"type": "error", "message": line}, status=status)

    async def seek(self, viewer: Recipient, fields: dict[str, Any]) -> None:
        """Send ``viewer`` the state of a checked ``seek`` message's moment."""
        try:
            opened = self.shelf.get(fields["replay"])
        except KeyError as exc:
            raise ProtocolError(str(exc.args[0])) from None
        loop = asyncio.get_running_loop()
        state = await loop.run_in_executor(None, opened.state, fields["t"], fields["seat"])
        viewer.post(state)
