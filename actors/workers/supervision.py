"""Supervision of worker processes: the one mechanism under both kinds of children.

The Gymnasium env workers (``actors/workers/env_worker.py``, driven by ``ProcessVecEnv``) and
the sim actor processes (``pipeline/run/actor_process.py``) are spawned children, each talking
to its parent over one duplex pipe of small msgpack messages. This module is what they share;
each side keeps its own message vocabulary on top:

- the codec (:func:`pack` / :func:`unpack`): msgpack, NumPy arrays as a typed extension;
- the start (:func:`spawn`, or :func:`spawn_by_path` for a child that must not import our
  packages) and the parent's handle on a child (:class:`ChildProcess`): the wait for a message
  with a deadline (the hand-shake), liveness (a reply and a death both wake a wait on the pipe
  and the process sentinel, also on an event loop: :func:`wait_readable`), and the stop
  (asked first by the caller, SIGKILL after a grace period);
- the error report: a child that catches an exception replies :func:`error_report`
  (``["err", ..., its traceback text]``); the parent re-raises it, the text as
  :class:`RemoteTraceback` or in its message;
- :func:`follow_parent` in the child: SIGINT and SIGTERM reach the whole process group (Ctrl-C,
  ``kill -- -PGID``, ``timeout``, ``systemctl stop``), and the parent decides when its
  children stop; a child ignores both and exits when told to or when its parent is gone;
- :func:`describe_exit`: how a child's process ended, in words (``killed by SIGSEGV``).

This file imports nothing of ours: a child started by :func:`spawn_by_path` loads it by path.
"""

from __future__ import annotations

import asyncio
import importlib.util
import multiprocessing
import os
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from types import ModuleType
from typing import Any

import msgpack
import numpy as np

ERR = "err"
"""The first field of an error report (:func:`error_report`)."""

RUN_NAME = "__midrange_child__"
"""``__name__`` under which ``runpy.run_path`` executes this file in a child of :func:`spawn_by_path`."""

_NDARRAY_EXT = 1


# ---- the codec -------------------------------------------------------------------------------
def _encode_default(obj: Any) -> Any:
    """msgpack fallback: NumPy scalars become Python scalars, arrays a typed extension."""
    if isinstance(obj, np.ndarray) and not obj.dtype.hasobject:
        header = msgpack.packb([obj.dtype.str, list(obj.shape)])
        return msgpack.ExtType(_NDARRAY_EXT, header + np.ascontiguousarray(obj).tobytes())
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot msgpack-encode a {type(obj).__name__}: {obj!r:.80}")


def _decode_ext(code: int, data: bytes) -> Any:
    if code != _NDARRAY_EXT:
        return msgpack.ExtType(code, data)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    dtype, shape = next(unpacker)
    body = data[unpacker.tell():]
    return np.frombuffer(body, dtype=np.dtype(dtype)).reshape(shape).copy()


def pack(message: Any) -> bytes:
    """Encode a control message."""
    data: bytes = msgpack.packb(message, default=_encode_default, use_bin_type=True)
    return data


def unpack(data: bytes) -> Any:
    """Decode a control message (NumPy arrays come back as arrays, tuples as lists)."""
    return msgpack.unpackb(data, ext_hook=_decode_ext, raw=False, strict_map_key=False)


# ---- the error report and the child's side ---------------------------------------------------
def error_report(*fields: Any) -> list[Any]:
    """What a child replies while it handles an exception: ``["err", *fields, traceback]``; the
    traceback text travels as a string, and the parent re-raises it naming where it came from."""
    return [ERR, *fields, traceback.format_exc()]


class RemoteTraceback(Exception):
    """The traceback text of an error raised in a child process."""

    def __init__(self, tb: str):
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


def send_quietly(conn: Connection, data: bytes) -> bool:
    """Send ``data``; False when the other end is gone (whoever awaits it sees that as EOF)."""
    try:
        conn.send_bytes(data)
        return True
    except OSError:
        return False


def follow_parent() -> None:
    """In a child: ignore SIGINT and SIGTERM, and exit at once when the parent process ends.

    Both signals reach the whole process group (Ctrl-C, ``kill -- -PGID``, ``timeout``,
    ``systemctl stop``, Slurm): the parent stops its children when it stops, so a child that
    died of them would be a failure in the middle of a clean stop. A child whose parent is gone
    (SIGKILL, a second Ctrl-C: exit 130 without a teardown) exits by itself, from a thread
    that waits on the parent's sentinel, even while its own work hangs.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None and parent.sentinel is not None:
        threading.Thread(target=_exit_when_gone, args=(parent.sentinel,), name="parent-watch",
                         daemon=True).start()


def _exit_when_gone(sentinel: int) -> None:
    wait([sentinel])  # readable once the parent process has ended
    os._exit(0)


# ---- the parent's side -----------------------------------------------------------------------
def describe_exit(exitcode: int | None) -> str:
    """How a child's process ended, for messages: ``killed by SIGSEGV``, ``exited with code 3``."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class WorkerFault(Exception):
    """A child ``died`` (its process ended, its pipe closed) or hit a ``timeout`` (no message in time)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(eq=False)
class ChildProcess:
    """The parent's handle on one spawned child and the parent's end of their pipe."""

    process: BaseProcess
    conn: Connection

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        return self.process.pid

    def fds(self) -> list[int]:
        """The descriptors that turn readable when the child sends or ends: the pipe, then the
        process sentinel."""
        return [self.conn.fileno(), self.process.sentinel]

    def wait(self, timeout_s: float | None) -> bool:
        """Wait up to ``timeout_s`` (None: as long as it takes) until a message or the child's
        end can be read; whether one can."""
        return bool(wait([self.conn, self.process.sentinel], timeout_s))

    def receive(self, timeout_s: float | None = None, max_bytes: int | None = None) -> bytes:
        """The child's next message, waited for up to ``timeout_s`` when given (None: read at
        once, blocking); :class:`WorkerFault` ``timeout`` when none came by then, ``died`` when
        the pipe is closed or the message is longer than ``max_bytes``."""
        if timeout_s is not None and not self.wait(timeout_s):
            raise WorkerFault("timeout")
        try:
            return self.conn.recv_bytes(max_bytes)
        except (EOFError, OSError):
            raise WorkerFault("died") from None

    def send(self, data: bytes) -> bool:
        """Send a message; False when the child is gone (its death is seen where its reply is
        awaited: the pipe reads as EOF, or its sentinel fires)."""
        return send_quietly(self.conn, data)

    def exit_description(self, grace_s: float = 1.0) -> str:
        """How the process ended (:func:`describe_exit`), once reaped: a process whose pipe
        closed or whose sentinel fired has ended, but may not be reaped yet, so it is waited
        for up to ``grace_s``."""
        self.process.join(grace_s)
        return describe_exit(self.process.exitcode)

    def stop(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` for the process to end, then SIGKILL it; close the pipe."""
        self.process.join(grace_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5.0)
        self.conn.close()


async def wait_readable(children: Sequence[ChildProcess], timeout_s: float) -> None:
    """Wait on the running event loop until one of ``children`` sends or ends, or ``timeout_s``
    has passed, without blocking the loop."""
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    fds = [fd for child in children for fd in child.fds()]
    for fd in fds:
        loop.add_reader(fd, ready.set)
    try:
        await asyncio.wait_for(ready.wait(), timeout_s)
    except asyncio.TimeoutError:
        pass
    finally:
        for fd in fds:
            loop.remove_reader(fd)
        # uvloop leaves a watched descriptor non-blocking: a message larger than the socket's
        # buffer (a league snapshot's weights) would then fail half-written.
        for child in children:
            os.set_blocking(child.conn.fileno(), True)


def spawn(ctx: BaseContext, name: str, target: Callable[..., object], kwargs: dict[str, Any]) -> ChildProcess:
    """Start ``target(conn=<the child's end of a duplex pipe>, **kwargs)`` in a daemon process
    named ``name``; returns at once."""
    parent_end, child_end = ctx.Pipe(duplex=True)
    process = ctx.Process(  # type: ignore[attr-defined]
        target=target, name=name, daemon=True, kwargs={**kwargs, "conn": child_end})
    return _start(process, parent_end, child_end)


def spawn_by_path(ctx: BaseContext, name: str, modules: Sequence[ModuleType], main: str,
                  kwargs: dict[str, Any]) -> ChildProcess:
    """Start ``main(conn=..., **kwargs)`` of the last of ``modules`` in a daemon process named
    ``name``, without importing the packages those modules belong to; returns at once.

    The child runs this file by path (``runpy.run_path``: unpickling its target imports only the
    standard library), then loads this module and ``modules`` by path, in order, each under its
    own name (so each may import the ones before it). It imports what those modules and its
    work import, never a package ``__init__`` (``actors`` imports torch: seconds per child).
    """
    files = [(m.__name__, str(m.__file__)) for m in (sys.modules[__name__], *modules)]
    parent_end, child_end = ctx.Pipe(duplex=True)
    child = {"files": files, "main": main, "kwargs": {**kwargs, "conn": child_end}}
    process = ctx.Process(  # type: ignore[attr-defined]
        target=runpy.run_path, args=(__file__,), name=name, daemon=True,
        kwargs={"init_globals": {"CHILD": child}, "run_name": RUN_NAME},
    )
    return _start(process, parent_end, child_end)


def _start(process: BaseProcess, parent_end: Connection, child_end: Connection) -> ChildProcess:
    try:
        process.start()
    finally:
        child_end.close()  # so that the child's death reads as EOF here
    return ChildProcess(process, parent_end)


def _run_loaded(files: list[tuple[str, str]], main: str, kwargs: dict[str, Any]) -> None:
    """In a child of :func:`spawn_by_path`: load ``files`` (module name, path) and call ``main``."""
    module: ModuleType | None = None
    for name, path in files:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    getattr(module, main)(**kwargs)


if __name__ == RUN_NAME:
    _run_loaded(**globals()["CHILD"])
