"""The Prometheus HTTP exporter (``prometheus_client``), serving one :class:`Metrics` facade.

Address and port: ``127.0.0.1:9400`` by default (``--metrics-addr``, ``--metrics-port``); port 0
takes any free port. An address that listens beyond this machine (``0.0.0.0``, ``::``, a
network interface's) is logged as a warning: anyone who reaches the port reads the metrics.
The server (:mod:`monitoring.http_server`) answers from a bounded number of threads and closes
idle connections. A busy port raises :class:`MetricsPortInUseError` naming the port and the
way out. With ``port_fallback=True`` the exporter instead tries the next ports and logs the one
it took (the returned :class:`Exporter` says it too).

Under ``torchrun`` every rank exports on its own port: ``port + LOCAL_RANK`` (ranks on different
machines may share a port number; ranks on one machine never collide), and
``midrange_build_info`` carries the global ``rank``. There is no gathering on rank 0: each
process's counters are its own, and Prometheus sums across targets.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from monitoring.collector import MetricsCollector
from monitoring.facade import Metrics
from monitoring.http_server import MetricsServer

DEFAULT_ADDR = "127.0.0.1"
"""Loopback by default: metrics of a training box are not published to the network unasked."""
DEFAULT_PORT = 9400
"""Base port; rank ``r`` of a ``torchrun`` job uses ``DEFAULT_PORT + LOCAL_RANK``."""
FALLBACK_TRIES = 32
"""Ports tried above a busy one when ``port_fallback`` is set."""

log = logging.getLogger(__name__)


class MetricsPortInUseError(OSError):
    """The metrics port is taken; the message names it and what to do."""


class MetricsAddressError(OSError):
    """The metrics address is not one this machine can listen on; the message names it and
    what is allowed."""


_ADDRESS_ERRNOS = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)


def open_to_network(addr: str) -> bool:
    """Whether a server listening on the numeric address ``addr`` can be reached from other
    machines (every address but the loopback ones)."""
    try:
        return not ipaddress.ip_address(addr.split("%")[0]).is_loopback
    except ValueError:
        return True


@dataclass
class Exporter:
    """A running exporter. ``close()`` stops the HTTP server."""

    addr: str
    """Address the server listens on."""
    port: int
    """Port actually taken (differs from the requested one after a fallback or with port 0)."""
    requested_port: int
    """Port that was asked for."""
    rank: int
    """``torch.distributed`` rank exported in ``midrange_build_info``."""
    registry: CollectorRegistry
    """The registry served (the facade's collector plus process and platform collectors)."""
    _server: MetricsServer

    @property
    def url(self) -> str:
        """The scrape URL."""
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.close()

    @property
    def open_to_network(self) -> bool:
        """Whether other machines can scrape it (it listens beyond the loopback interface)."""
        return open_to_network(str(self._server.server_address[0]))

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_registry(metrics: Metrics, rank: int = 0) -> CollectorRegistry:
    """A registry holding the facade's collector and the standard process/platform/GC ones."""
    registry = CollectorRegistry()
    registry.register(MetricsCollector(metrics, rank=rank))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def exposition(metrics: Metrics, rank: int = 0) -> bytes:
    """The text exposition of ``metrics`` as a scrape would return it (no server needed)."""
    registry = CollectorRegistry()
    registry.register(MetricsCollector(metrics, rank=rank))
    return generate_latest(registry)


def distributed_rank() -> tuple[int, int]:
    """(global rank, local rank) from the ``torchrun`` environment, (0, 0) outside it."""
    def _env_int(name: str) -> int:
        raw = os.environ.get(name, "0")
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None

    return _env_int("RANK"), _env_int("LOCAL_RANK")


def start_exporter(
    metrics: Metrics,
    addr: str = DEFAULT_ADDR,
    port: int = DEFAULT_PORT,
    port_fallback: bool = False,
    rank: int | None = None,
    local_rank: int | None = None,
) -> Exporter:
    """Serve ``metrics`` over HTTP at ``http://addr:port + local_rank/metrics``.

    Args:
        metrics: the facade to export.
        addr: listen address (``127.0.0.1`` default; ``0.0.0.0`` to let another host scrape).
        port: base port; 0 takes any free port (tests).
        port_fallback: when the port is busy, try the next :data:`FALLBACK_TRIES` ports and log
            the one taken, instead of raising.
        rank, local_rank: default to ``RANK`` / ``LOCAL_RANK`` from the environment (0 outside
            ``torchrun``); the port used is ``port + local_rank`` when ``port`` is not 0.

    Raises:
        MetricsPortInUseError: the port is busy and ``port_fallback`` is off (or no port in
            the fallback range was free).
        MetricsAddressError: ``addr`` is no address of this machine (or no host name at all).
        ValueError: a port outside 0..65535.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"metrics port must be an integer in 0..65535, got {port!r}")
    env_rank, env_local = distributed_rank()
    rank = env_rank if rank is None else rank
    local_rank = env_local if local_rank is None else local_rank
    wanted = port + local_rank if port else 0
    if wanted > 65535:
        raise ValueError(f"metrics port {port} + local rank {local_rank} exceeds 65535")
    registry = make_registry(metrics, rank=rank)
    candidates = [wanted]
    if port_fallback and wanted:
        candidates += [p for p in range(wanted + 1, wanted + 1 + FALLBACK_TRIES) if p <= 65535]
    last_error: OSError | None = None
    for candidate in candidates:
        try:
            server = MetricsServer(addr, candidate, registry)
        except OSError as exc:
            if isinstance(exc, socket.gaierror) or exc.errno in _ADDRESS_ERRNOS:
                raise MetricsAddressError(
                    exc.errno, f"cannot listen on {addr}: {(exc.strerror or str(exc)).lower()} (give an "
                    f"address of this machine: {DEFAULT_ADDR} for it alone, 0.0.0.0 or :: for every "
                    "interface)") from None
            if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                raise OSError(exc.errno, f"cannot serve metrics on {addr}:{candidate}: {exc.strerror}") from exc
            last_error = exc
            continue
        taken = server.server_address[1]
        if candidate != wanted:
            log.warning("metrics port %d on %s is busy; exporting on %s:%d instead", wanted, addr, addr, taken)
        log.info("exporting metrics on http://%s:%d/metrics (rank %d)", addr, taken, rank)
        if open_to_network(str(server.server_address[0])):
            log.info("metrics on %s:%d are open to the network", addr, taken)
        return Exporter(addr, taken, wanted, rank, registry, server)
    tried = f"ports {candidates[0]}..{candidates[-1]}" if len(candidates) > 1 else f"port {wanted}"
    raise MetricsPortInUseError(
        errno.EADDRINUSE,
        f"cannot export metrics: {tried} on {addr} already in use"
        f"{f' (local rank {local_rank} adds {local_rank} to the base port {port})' if local_rank else ''}; "
        f"pass --metrics-port with a free port, or --metrics-port 0 for any free port",
    ) from last_error
