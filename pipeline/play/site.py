"""Where the cockpit listens: a port, or when it is busy the next free one, said out loud."""

from __future__ import annotations

import errno
import logging
import os

from aiohttp import web

from core.command import squeezed

FALLBACK_TRIES = 32
"""Ports tried above a busy one before giving up."""

log = logging.getLogger(__name__)


class ServeError(ValueError):
    """The page cannot be served on the address asked for (a busy port range, an address that
    is not this machine's); one line saying which and what to pass instead."""


async def start_site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host:port``, or when that port is busy on the first free one of the
    next :data:`FALLBACK_TRIES`, saying so; port 0 takes any free port. A busy range or an
    address that is not this machine's raises :class:`ServeError`."""
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    candidates = [port] + ([p for p in range(port + 1, port + 1 + FALLBACK_TRIES) if p <= 65535] if port else [])
    for candidate in candidates:
        site = web.TCPSite(runner, host, candidate)
        try:
            await site.start()
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                await runner.cleanup()
                reason = os.strerror(exc.errno).lower() if exc.errno else squeezed(exc)
                raise ServeError(f"cannot serve the page on {host}:{candidate}: {reason} "
                                 "(--host must be an address of this machine: 127.0.0.1 for it alone, 0.0.0.0 "
                                 "for every interface)") from None
            continue
        taken = runner.addresses[-1][1] if runner.addresses else candidate
        if candidate != port:
            log.warning("port %d on %s is busy; serving on %s:%d instead", port, host, host, taken)
        return runner, int(taken)
    await runner.cleanup()
    tried = f"ports {candidates[0]}..{candidates[-1]}" if len(candidates) > 1 else f"port {port}"
    raise ServeError(f"cannot serve the page: {tried} on {host} already in use; "
                     "pass --port with a free port, or --port 0 for any free port")
