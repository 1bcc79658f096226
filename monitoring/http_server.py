"""The exporter's HTTP server: a bounded number of threads however many clients connect.

``prometheus_client``'s own server starts a thread for every connection, so idle connections
(a misbehaving client, a port scanner) pile up threads without limit. Here one thread accepts
connections and waits on them all with a selector; a connection is handed to one of
:data:`WORKERS` threads only once its request has begun to arrive, a connection idle for
:data:`IDLE_TIMEOUT_S` is closed, and at most :data:`MAX_CONNECTIONS` wait at once (the
longest waiting is closed to admit a new one).
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

WORKERS = 4
"""Threads answering requests."""
IDLE_TIMEOUT_S = 10.0
"""A connection that sends no (complete) request for this long is closed."""
MAX_CONNECTIONS = 256
"""Connections waiting for their request at once."""
_POLL_S = 0.25


class _QuietHandler(WSGIRequestHandler):
    """Writes no line per request to stderr."""

    def log_message(self, format: str, *args: object) -> None:
        pass


class MetricsServer(WSGIServer):
    """Serves ``registry`` at ``(addr, port)`` from its own thread and :data:`WORKERS` more;
    :meth:`close` stops them and releases the port."""

    request_queue_size = 128  # the listen backlog: connections arriving while one is accepted

    def __init__(self, addr: str, port: int, registry: CollectorRegistry) -> None:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, sockaddr = infos[0]
        self.address_family = family
        super().__init__((str(sockaddr[0]), port), _QuietHandler)
        self.set_app(make_wsgi_app(registry))
        self._workers = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="metrics-http")
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="metrics-accept", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        waiting: dict[socket.socket, float] = {}  # connection -> when it began to wait
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ, None)
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=_POLL_S):
                    if key.data is None:
                        self._accept(selector, waiting)
                        continue
                    conn: socket.socket = key.fileobj  # type: ignore[assignment]
                    selector.unregister(conn)
                    del waiting[conn]
                    self._workers.submit(self._answer, conn, key.data)
                now = time.monotonic()
                for conn, since in list(waiting.items()):
                    if now - since > IDLE_TIMEOUT_S:
                        self._drop(selector, waiting, conn)
            for conn in list(waiting):
                self._drop(selector, waiting, conn)

    def _accept(self, selector: selectors.BaseSelector, waiting: dict[socket.socket, float]) -> None:
        try:
            conn, client = self.socket.accept()
        except OSError:
            return
        if len(waiting) >= MAX_CONNECTIONS:
            self._drop(selector, waiting, min(waiting, key=waiting.__getitem__))
        selector.register(conn, selectors.EVENT_READ, client)
        waiting[conn] = time.monotonic()

    @staticmethod
    def _drop(selector: selectors.BaseSelector, waiting: dict[socket.socket, float], conn: socket.socket) -> None:
        selector.unregister(conn)
        del waiting[conn]
        conn.close()

    def _answer(self, conn: socket.socket, client: tuple[str, int]) -> None:
        try:
            conn.settimeout(IDLE_TIMEOUT_S)  # a request that stops half-way frees its worker
            self.finish_request(conn, client)
        except Exception:  # a client that went away, or timed out half-way: nothing to answer
            pass
        finally:
            self.shutdown_request(conn)

    def close(self) -> None:
        """Stop accepting and answering, close every connection and the port."""
        self._stop.set()
        self.thread.join(timeout=5)
        self._workers.shutdown(wait=True, cancel_futures=True)
        self.server_close()
