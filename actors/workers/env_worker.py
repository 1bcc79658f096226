"""One env worker process: the K environments it hosts and the loop that serves them.

The parent starts it with ``supervision.spawn_by_path`` (``actors/workers/env_worker_handle.py``):
a spawned worker then imports the standard library, NumPy, msgpack and whatever the env needs,
not the ``actors`` package (whose ``__init__`` imports torch: seconds per worker). Hence this
file imports nothing of ours but the two modules loaded before it, and those only as ``from
<module> import <names>``. The protocol is ``actors/workers/env_protocol.py``.
"""

from __future__ import annotations

import pickle
import traceback
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from actors.workers.env_protocol import (
    ATTACH,
    CALL,
    CLOSE,
    MAX_MESSAGE_BYTES,
    OK,
    RESET,
    STEP,
    ArraySpec,
    attach_untracked,
    buffer_layout,
    buffer_views,
    pack,
)
from actors.workers.supervision import error_report, follow_parent, unpack


def _error(env_index: int, method: str) -> bytes:
    # The parent re-raises the report naming the env.
    return pack(error_report(env_index, method))


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
            except (EOFError, OSError):  # the parent is gone
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
    follow_parent()  # the parent decides when its workers stop
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
    except (EOFError, OSError):  # the parent is gone
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


def probe_main(conn: Connection, spec: bytes) -> None:
    """The env probe's child (``actors/workers/env_probe.py``): make the env of ``spec`` and
    reset it once, reporting each stage before it starts (with the env's spaces before the
    reset, which the parent checks first), then the outcome (pickled dicts)."""
    follow_parent()
    stage = "make"
    report: dict[str, Any] = {"ok": True}
    try:
        [(_, factory)] = _factories(spec, 1)
        conn.send_bytes(pickle.dumps({"stage": stage}))
        env = factory()
        stage = "reset"
        conn.send_bytes(pickle.dumps({"stage": stage, "spaces": (env.observation_space, env.action_space)}))
        obs, _ = env.reset(seed=0)
        shape = getattr(env.observation_space, "shape", None)
        if shape is not None and np.shape(obs) != tuple(shape):
            report = {"ok": False, "error": f"reset returned an observation of shape {np.shape(obs)}, "
                                            f"not the observation space's {tuple(shape)}"}
        env.close()
    except SystemExit as exc:
        doing = "being made" if stage == "make" else "being reset"
        report = {"ok": False, "error": f"it called sys.exit({exc.code!r}) while {doing}"}
    except BaseException as exc:
        what = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        report = {"ok": False, "error": f"cannot be made: {what}" if stage == "make" else f"its reset raised {what}"}
    conn.send_bytes(pickle.dumps(report))
