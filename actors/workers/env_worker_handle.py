"""The parent's end of the env workers: a handle on each (start, hand-shake, send, stop), the
wait for their replies, and the pool's shutdown.

:class:`WorkerHandle` starts ``actors/workers/env_worker.py`` by file path
(``supervision.spawn_by_path``); ``actors/workers/process_vec_env.py`` drives many of them.
"""

from __future__ import annotations

import math
import pickle
import select
import time
from dataclasses import dataclass, field
from multiprocessing.context import BaseContext
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from actors.workers import env_protocol, env_worker
from actors.workers.env_protocol import CLOSE, MAX_MESSAGE_BYTES, pack
from actors.workers.supervision import ChildProcess, WorkerFault, spawn_by_path, unpack


class EnvError(RuntimeError):
    """An environment raised in its worker: ``env_index``, ``method`` and the worker's traceback."""

    def __init__(self, env_index: int, method: str, worker_traceback: str, env_id: str) -> None:
        self.env_index, self.method, self.worker_traceback = env_index, method, worker_traceback
        last = (worker_traceback.strip().splitlines() or ["?"])[-1]
        super().__init__(
            f"env {env_index} ({env_id}) raised in {method}: {last}\n"
            f"--- worker traceback ---\n{worker_traceback.rstrip()}"
        )


_OWNED_BLOCKS: dict[str, SharedMemory] = {}
"""The shared blocks this process created and has not unlinked yet, by name."""


def unlink_owned_blocks() -> None:
    """Unlink every shared block this process still owns: for an exit that skips the pools'
    teardown (``os._exit`` after a second interrupt), so that nothing is left in /dev/shm."""
    for name, shm in list(_OWNED_BLOCKS.items()):
        _OWNED_BLOCKS.pop(name, None)
        try:
            shm.unlink()
        except FileNotFoundError:
            pass


@dataclass(eq=False)
class WorkerHandle:
    """The parent's handle on one worker process and its shared block (which outlives restarts)."""

    index: int
    envs: slice
    """The global indices of its envs."""
    shm: SharedMemory | None = None
    views: dict[str, np.ndarray] = field(default_factory=dict)
    child: ChildProcess | None = None
    pending: str | None = None
    """The op whose reply is awaited, if any."""
    deadline: float = math.inf
    failures: int = 0
    """Failures since it last took ``healthy_steps`` steps in a row without one."""
    steps_since_failure: int = 0
    """Successful steps since its last failure (a restart)."""

    def spawn(self, ctx: BaseContext, spec: bytes) -> None:
        """Start the process (by file path, see the module docstring); returns at once."""
        args = {"spec": spec, "env_offset": self.envs.start, "num_envs": self.envs.stop - self.envs.start}
        self.child = spawn_by_path(ctx, f"env-worker-{self.index}", [env_protocol, env_worker], "worker_main", args)

    def hello(self, deadline: float) -> dict[str, Any]:
        """The worker's report once its envs are built (pickled: spaces, env id, metadata)."""
        assert self.child is not None
        report: dict[str, Any] = pickle.loads(self.child.receive(max(0.0, deadline - time.monotonic())))
        return report

    def send(self, message: list[Any] | bytes, op: str | None, timeout_s: float = math.inf) -> None:
        """Send a control message; ``op`` (with its ``timeout_s``) is what the reply will answer."""
        assert self.child is not None
        self.pending, self.deadline = op, (time.monotonic() + timeout_s if op else math.inf)
        self.child.send(message if isinstance(message, bytes) else pack(message))

    def stop(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` for the process to end, then SIGKILL it; close the pipe."""
        if self.child is not None:
            self.child.stop(grace_s)
        self.child, self.pending, self.deadline = None, None, math.inf

    def share(self, size: int, name: str) -> SharedMemory:
        """Create its shared block (this process owns it: :func:`unlink_owned_blocks`)."""
        self.shm = _OWNED_BLOCKS[name] = SharedMemory(create=True, size=size, name=name)
        return self.shm

    def release(self) -> None:
        """Unlink the shared block (a view still held elsewhere keeps the memory, not the name)."""
        self.views = {}
        if self.shm is not None:
            _OWNED_BLOCKS.pop(self.shm.name, None)
            try:
                self.shm.close()
            except BufferError:
                pass
            try:
                self.shm.unlink()
            except FileNotFoundError:
                pass
            self.shm = None


def wait_ready(pending: list[WorkerHandle], until: float) -> list[tuple[WorkerHandle, Any, str | None]]:
    """Wait until a pending worker replied, died or timed out (or ``until``, monotonic); return
    (handle, reply, fault reason) for each such worker."""
    # One poll over every pipe and process sentinel: a reply, an EOF and a death all wake it.
    poller = select.poll()
    owner: dict[int, tuple[WorkerHandle, bool]] = {}
    for h in pending:
        assert h.child is not None
        pipe, sentinel = h.child.fds()
        for fd, is_pipe in ((pipe, True), (sentinel, False)):
            owner[fd] = (h, is_pipe)
            poller.register(fd, select.POLLIN)
    wait_s = min(min(h.deadline for h in pending), until) - time.monotonic()
    readable: dict[int, tuple[WorkerHandle, bool]] = {}
    for fd, _ in poller.poll(None if wait_s == math.inf else max(0.0, wait_s) * 1e3):
        h, is_pipe = owner[fd]
        readable[h.index] = (h, is_pipe or readable.get(h.index, (h, False))[1])
    seen: dict[int, tuple[WorkerHandle, Any, str | None]] = {}
    for h, pipe_readable in readable.values():
        seen[h.index] = (h, None, "died")  # a sentinel alone: the process ended
        if pipe_readable:  # a reply (even one sent just before dying), or EOF
            assert h.child is not None
            try:
                seen[h.index] = (h, unpack(h.child.receive(max_bytes=MAX_MESSAGE_BYTES)), None)
            except WorkerFault:
                pass
    now = time.monotonic()
    for h in pending:
        if h.index not in seen and now >= h.deadline:
            seen[h.index] = (h, None, "timeout")
    return list(seen.values())


def shutdown(handles: list[WorkerHandle]) -> None:
    """Stop every worker (``close`` first, SIGKILL after a second) and unlink every block; the
    pool's finalizer, so also run at interpreter exit."""
    for h in handles:
        if h.child is not None and h.pending is None:
            h.child.send(pack([CLOSE]))
    deadline = time.monotonic() + 1.0
    for h in handles:
        h.stop(max(0.0, deadline - time.monotonic()))
        h.release()
