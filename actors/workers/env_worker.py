"""One env worker process: the worker side, the parent's handle on it, and the protocol.

A worker hosts K environments and steps them in a loop, so one message moves K env-steps.
Observations, final observations, rewards, terminated, truncated and actions live in one
shared-memory block per worker (:func:`buffer_layout`), written in place; the pipe carries only
small msgpack-encoded control messages (:func:`pack` / :func:`unpack`, at most
:data:`MAX_MESSAGE_BYTES`). Pickle is used once per start: the env factory goes in, the spaces
come back. :class:`WorkerHandle` is the parent's end (start, hand-shake, send, wait, stop);
``actors/workers/process_vec_env.py`` drives many of them.

The parent starts a worker with ``runpy.run_path`` on this file rather than importing it: a
spawned child then imports the standard library, NumPy, msgpack and whatever the env needs,
not the ``actors`` package (whose ``__init__`` imports torch: seconds per worker). Hence this
file imports nothing of ours.
"""

from __future__ import annotations

import math
import pickle
import runpy
import select
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import msgpack
import numpy as np

MAX_MESSAGE_BYTES = 1 << 20
"""Largest control message either side sends or accepts (1 MiB): infos and ``call`` results
are meant to be small; bulk data belongs in the shared-memory block."""

RUN_NAME = "__midrange_env_worker__"
"""``__name__`` under which ``runpy.run_path`` executes this file in a worker process."""

# Control messages: [op, ...] from the parent, [status, ...] from the worker.
STEP, RESET, CALL, CLOSE, ATTACH = "step", "reset", "call", "close", "attach"
OK, ERR = "ok", "err"

_NDARRAY_EXT = 1
_ALIGN = 64  # each array starts on its own cache line


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
    """Encode a control message; refuse one above :data:`MAX_MESSAGE_BYTES`."""
    data: bytes = msgpack.packb(message, default=_encode_default, use_bin_type=True)
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(
            f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit "
            f"(infos, call arguments and results must be small)"
        )
    return data


def unpack(data: bytes) -> Any:
    """Decode a control message (NumPy arrays come back as arrays, tuples as lists)."""
    return msgpack.unpackb(data, ext_hook=_decode_ext, raw=False, strict_map_key=False)


ArraySpec = tuple[tuple[int, ...], str]
"""(shape of one env's entry, dtype string) of an array in the shared block."""


def buffer_layout(num_envs: int, obs: ArraySpec, action: ArraySpec) -> tuple[dict[str, tuple[int, tuple[int, ...], str]], int]:
    """Where each array of a worker's shared block lies: name -> (byte offset, shape, dtype),
    and the block's size. Both sides compute it from the same specs."""
    fields = {
        "obs": obs, "final_obs": obs, "actions": action,
        "rewards": ((), "<f8"), "terminated": ((), "|b1"), "truncated": ((), "|b1"),
    }
    layout: dict[str, tuple[int, tuple[int, ...], str]] = {}
    offset = 0
    for name, (shape, dtype) in fields.items():
        full = (num_envs, *shape)
        layout[name] = (offset, full, dtype)
        nbytes = int(np.prod(full, dtype=np.int64)) * np.dtype(dtype).itemsize
        offset += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
    return layout, offset


def buffer_views(shm: SharedMemory, layout: dict[str, tuple[int, tuple[int, ...], str]]) -> dict[str, np.ndarray]:
    """NumPy views of a shared block (no copies)."""
    return {
        name: np.ndarray(shape, dtype=np.dtype(dtype), buffer=shm.buf, offset=offset)
        for name, (offset, shape, dtype) in layout.items()
    }


def attach_untracked(name: str) -> SharedMemory:
    """Attach to the parent's block without registering it with the resource tracker.

    The parent created the block and alone unlinks it; a worker that registered it too would
    have the tracker unlink it (or warn about a leak) when the worker exits. Python 3.13 has
    ``track=False``; before that, registration is skipped for the duration of the attach.
    """
    if sys.version_info >= (3, 13):
        return SharedMemory(name=name, track=False)  # type: ignore[call-arg,unused-ignore]
    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return SharedMemory(name=name)
    finally:
        resource_tracker.register = register


class EnvError(RuntimeError):
    """An environment raised in its worker: ``env_index``, ``method`` and the worker's traceback."""

    def __init__(self, env_index: int, method: str, worker_traceback: str, env_id: str) -> None:
        self.env_index, self.method, self.worker_traceback = env_index, method, worker_traceback
        last = (worker_traceback.strip().splitlines() or ["?"])[-1]
        super().__init__(
            f"env {env_index} ({env_id}) raised in {method}: {last}\n"
            f"--- worker traceback ---\n{worker_traceback.rstrip()}"
        )


class WorkerFault(Exception):
    """A worker ``died`` (its process ended) or hit a ``timeout`` (no reply in time)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---- the parent's end ------------------------------------------------------------------------
@dataclass(eq=False)
class WorkerHandle:
    """The parent's handle on one worker process and its shared block (which outlives restarts)."""

    index: int
    envs: slice
    """The global indices of its envs."""
    shm: SharedMemory | None = None
    views: dict[str, np.ndarray] = field(default_factory=dict)
    process: BaseProcess | None = None
    conn: Connection | None = None
    pending: str | None = None
    """The op whose reply is awaited, if any."""
    deadline: float = math.inf
    failures: int = 0
    """Restarts since its last successful step."""

    def spawn(self, ctx: BaseContext, spec: bytes) -> None:
        """Start the process (by file path, see the module docstring); returns at once."""
        parent, child = ctx.Pipe(duplex=True)
        args = {"conn": child, "spec": spec, "env_offset": self.envs.start,
                "num_envs": self.envs.stop - self.envs.start}
        process = ctx.Process(  # type: ignore[attr-defined]
            target=runpy.run_path, args=(__file__,), name=f"env-worker-{self.index}", daemon=True,
            kwargs={"init_globals": {"WORKER_ARGS": args}, "run_name": RUN_NAME},
        )
        try:
            process.start()
        finally:
            child.close()  # so that the worker's death reads as EOF here
        self.process, self.conn = process, parent

    def hello(self, deadline: float) -> dict[str, Any]:
        """The worker's report once its envs are built (pickled: spaces, env id, metadata)."""
        assert self.conn is not None and self.process is not None
        if not wait([self.conn, self.process.sentinel], max(0.0, deadline - time.monotonic())):
            raise WorkerFault("timeout")
        try:
            report: dict[str, Any] = pickle.loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            raise WorkerFault("died") from None
        return report

    def send(self, message: list[Any] | bytes, op: str | None, timeout_s: float = math.inf) -> None:
        """Send a control message; ``op`` (with its ``timeout_s``) is what the reply will answer."""
        assert self.conn is not None
        self.pending, self.deadline = op, (time.monotonic() + timeout_s if op else math.inf)
        try:
            self.conn.send_bytes(message if isinstance(message, bytes) else pack(message))
        except OSError:  # a dead worker: its pending reply reads as EOF or its sentinel fires
            pass

    def stop(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` for the process to end, then SIGKILL it; close the pipe."""
        if self.process is not None:
            self.process.join(grace_s)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5.0)
        if self.conn is not None:
            self.conn.close()
        self.process, self.conn, self.pending, self.deadline = None, None, None, math.inf

    def release(self) -> None:
        """Unlink the shared block (a view still held elsewhere keeps the memory, not the name)."""
        self.views = {}
        if self.shm is not None:
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
        assert h.conn is not None and h.process is not None
        for fd, is_pipe in ((h.conn.fileno(), True), (h.process.sentinel, False)):
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
            assert h.conn is not None
            try:
                seen[h.index] = (h, unpack(h.conn.recv_bytes(MAX_MESSAGE_BYTES)), None)
            except (EOFError, OSError):
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
        if h.conn is not None and h.pending is None:
            try:
                h.conn.send_bytes(pack([CLOSE]))
            except OSError:
                pass
    deadline = time.monotonic() + 1.0
    for h in handles:
        h.stop(max(0.0, deadline - time.monotonic()))
        h.release()


# ---- the worker's end ------------------------------------------------------------------------
def _error(env_index: int, method: str) -> bytes:
    # The traceback text travels as a string: the parent re-raises it naming the env.
    return pack([ERR, env_index, method, traceback.format_exc()])


def _encodable(value: Any) -> bool:
    try:
        pack(value)
    except Exception:
        return False
    return True


def _factories(spec: bytes, num_envs: int) -> list[tuple[str, Any]]:
    """(name for errors, zero-argument factory) of each env of this worker."""
    kind, *rest = pickle.loads(spec)
    if kind == "id":
        import functools

        import gymnasium

        env_id, kwargs = rest
        return [(env_id, functools.partial(gymnasium.make, env_id, **kwargs))] * num_envs
    (fns,) = rest
    return [(_fn_name(fn), fn) for fn in fns]


def _fn_name(fn: Any) -> str:
    target = getattr(fn, "func", fn)  # a functools.partial names its function
    return str(getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(fn).__name__)


def _env_name(env: Any) -> str:
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return str(spec.id)
    return type(getattr(env, "unwrapped", env)).__name__


class _EnvLoop:
    """The K environments of one worker and its loop."""

    def __init__(self, conn: Connection, envs: list[Any], env_offset: int) -> None:
        self.conn = conn
        self.envs = envs
        self.env_offset = env_offset
        self.views: dict[str, np.ndarray] = {}
        self.shm: SharedMemory | None = None
        self.scalar_action = False

    def attach(self, name: str, obs: ArraySpec, action: ArraySpec) -> None:
        obs = (tuple(obs[0]), obs[1])
        action = (tuple(action[0]), action[1])
        self.shm = attach_untracked(name)
        layout, _ = buffer_layout(len(self.envs), obs, action)
        self.views = buffer_views(self.shm, layout)
        self.scalar_action = action[0] == ()

    def detach(self) -> None:
        """Drop the views, then unmap the block (never unlink: the parent owns it)."""
        self.views = {}
        if self.shm is not None:
            self.shm.close()
            self.shm = None

    def step(self) -> bytes:
        v = self.views
        obs_b, final_b, act_b = v["obs"], v["final_obs"], v["actions"]
        rew_b, term_b, trunc_b = v["rewards"], v["terminated"], v["truncated"]
        infos: dict[int, list[Any]] = {}
        for j, env in enumerate(self.envs):
            try:
                # A copy, so an env that keeps its action never sees the next one written.
                action = act_b[j] if self.scalar_action else act_b[j].copy()
                obs, reward, terminated, truncated, info = env.step(action)
                rew_b[j], term_b[j], trunc_b[j] = reward, terminated, truncated
                if terminated or truncated:  # same-step autoreset, as SyncVectorEnv does
                    final_b[j] = obs
                    final_info = info
                    obs, info = env.reset()
                    infos[j] = [info, final_info]
                elif info:
                    infos[j] = [info, None]
                obs_b[j] = obs
            except Exception:
                return _error(self.env_offset + j, "step")
        return self._reply(infos, "step")

    def reset(self, seeds: list[int | None], options: dict[str, Any] | None) -> bytes:
        obs_b = self.views["obs"]
        infos: dict[int, Any] = {}
        for j, env in enumerate(self.envs):
            try:
                obs, info = env.reset(seed=seeds[j], options=options)
                obs_b[j] = obs
            except Exception:
                return _error(self.env_offset + j, "reset")
            if info:
                infos[j] = info
        return self._reply(infos, "reset")

    def call(self, name: str, mode: str, args: list[Any], kwargs: dict[str, Any]) -> bytes:
        results: list[Any] = []
        for j, env in enumerate(self.envs):
            try:
                if mode == "set":  # as SyncVectorEnv.set_attr does
                    env.set_wrapper_attr(name, args[j])
                    results.append(None)
                    continue
                attr = env.get_wrapper_attr(name) if hasattr(env, "get_wrapper_attr") else getattr(env, name)
                results.append(attr(*args, **kwargs) if mode == "call" and callable(attr) else attr)
            except Exception:
                return _error(self.env_offset + j, f"call {name!r}")
        return self._reply(results, f"call {name!r}")

    def _reply(self, payload: dict[int, Any] | list[Any], method: str) -> bytes:
        try:
            return pack([OK, payload])
        except Exception:
            # Name the env whose part cannot be encoded (the first, if only the sum is too big).
            items = payload.items() if isinstance(payload, dict) else enumerate(payload)
            bad = next((j for j, part in items if not _encodable(part)), 0)
            return _error(self.env_offset + bad, f"{method} reply")

    def loop(self) -> None:
        while True:
            try:
                message = unpack(self.conn.recv_bytes(MAX_MESSAGE_BYTES))
            except EOFError:  # the parent is gone
                return
            op = message[0]
            if op == STEP:
                reply = self.step()
            elif op == RESET:
                reply = self.reset(message[1], message[2])
            elif op == CALL:
                reply = self.call(*message[1:])
            elif op == CLOSE:
                return
            else:
                raise ValueError(f"unknown control message {op!r}")
            self.conn.send_bytes(reply)


def worker_main(conn: Connection, spec: bytes, env_offset: int, num_envs: int) -> None:
    """Build ``num_envs`` envs from ``spec``, report their spaces (pickled, once), attach the
    shared block named by the parent, then serve control messages until ``close`` or EOF."""
    # Ctrl-C reaches the whole process group: the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    envs: list[Any] = []
    factories: list[tuple[str, Any]] = []
    try:
        factories = _factories(spec, num_envs)
        for _, factory in factories:
            envs.append(factory())
        first = envs[0]
        hello: dict[str, Any] = {
            "ok": True, "env_id": _env_name(first),
            "observation_space": first.observation_space, "action_space": first.action_space,
            "metadata": dict(getattr(first, "metadata", {}) or {}),
            "render_mode": getattr(first, "render_mode", None),
            "mismatch": [
                env_offset + j for j, env in enumerate(envs)
                if env.observation_space != first.observation_space or env.action_space != first.action_space
            ],
        }
    except Exception:
        name = factories[len(envs)][0] if len(envs) < len(factories) else "?"
        hello = {"ok": False, "env_index": env_offset + len(envs), "env_id": name,
                 "traceback": traceback.format_exc()}
    conn.send_bytes(pickle.dumps(hello))
    if not hello["ok"]:
        return
    worker = _EnvLoop(conn, envs, env_offset)
    try:
        message = unpack(conn.recv_bytes(MAX_MESSAGE_BYTES))
    except EOFError:
        return
    if message[0] != ATTACH:
        raise ValueError(f"expected {ATTACH!r} first, got {message[0]!r}")
    worker.attach(*message[1:])
    try:
        worker.loop()
    finally:
        for env in envs:
            try:
                env.close()
            except Exception:
                traceback.print_exc()
        worker.detach()


if __name__ == RUN_NAME:
    _args = globals()["WORKER_ARGS"]
    worker_main(_args["conn"], _args["spec"], _args["env_offset"], _args["num_envs"])
