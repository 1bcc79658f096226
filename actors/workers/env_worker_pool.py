"""The workers under ``ProcessVecEnv``: starting them, restarting those that die or hang, their
shared blocks, and closing them all.

:class:`EnvWorkerPool` is the base of :class:`actors.workers.process_vec_env.ProcessVecEnv`
(which adds the stepping API and documents the constructor's arguments). Each worker is a
:class:`actors.workers.env_worker_handle.WorkerHandle`; the worker side and the protocol are
``actors/workers/env_worker.py`` and ``actors/workers/env_protocol.py``.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import secrets
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from actors.workers import env_protocol as proto
from actors.workers.env_worker_handle import EnvError, WorkerHandle, shutdown, wait_ready
from actors.workers.supervision import WorkerFault
from monitoring.facade import Metrics

log = logging.getLogger("actors.workers.process_vec_env")  # the logger the pool's users know

CONTEXTS = ("spawn", "forkserver")
"""Start methods: fork is refused (a forked process of a threaded torch parent can deadlock)."""
RESTART_REASONS = ("died", "timeout")
"""Why a worker was restarted: its process ended, or a reply took longer than ``step_timeout_s``."""

EnvFn = Callable[[], gymnasium.Env]


class WorkerCrashError(RuntimeError):
    """A worker kept dying or hanging: ``max_restarts`` restarts without ``healthy_steps``
    steps between two failures, and a failure more; the pool is closed."""


@dataclass
class TakenStep:
    """A worker's step results, copied out of its block, not yet returned by recv()."""

    worker: WorkerHandle
    infos: dict[int, list[Any]]  # local env -> [info, final_info or None]
    final_obs: dict[int, np.ndarray]


def _array_spec(space: gymnasium.Space, role: str, env_id: str) -> proto.ArraySpec:
    """How one env's observation or action lies in the shared block; other spaces are refused."""
    if role == "observation" and isinstance(space, spaces.Box):
        return tuple(space.shape), space.dtype.str
    if role == "action":
        if isinstance(space, spaces.Discrete):
            return (), np.dtype(np.int64).str
        if isinstance(space, (spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)):
            return tuple(space.shape), np.dtype(space.dtype).str
    supported = "Box" if role == "observation" else "Discrete, MultiDiscrete, MultiBinary or Box"
    raise ValueError(f"ProcessVecEnv shares {supported} {role} spaces only; env {env_id!r} has {role} space {space}")


def _check_positive_int(name: str, value: Any, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ValueError(f"{name} must be an int in [1, {maximum}], got {value!r}")
    return value


class EnvWorkerPool(VectorEnv):
    """Gymnasium envs in worker processes with shared-memory blocks, started, restarted and
    closed; the constructor's arguments are documented on ``ProcessVecEnv``."""

    def __init__(
        self, env_fn: str | EnvFn | Sequence[EnvFn], num_envs: int, num_workers: int | None = None, *,
        batch_size: int | None = None, env_kwargs: dict[str, Any] | None = None,
        step_timeout_s: float = 60.0, start_timeout_s: float = 120.0, max_restarts: int = 3,
        healthy_steps: int = 1000, context: str = "spawn", copy: bool = True,
        metrics: Metrics | None = None,
    ) -> None:
        """Check the arguments (see ``ProcessVecEnv``), start the workers and share their blocks."""
        num_envs = _check_positive_int("num_envs", num_envs, 1 << 20)
        if num_workers is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
            num_workers = max(d for d in range(1, min(cores, num_envs) + 1) if num_envs % d == 0)
        if _check_positive_int("num_workers", num_workers, num_envs) and num_envs % num_workers:
            raise ValueError(f"num_workers must divide num_envs={num_envs}, got {num_workers}")
        k = num_envs // num_workers
        batch_size = _check_positive_int("batch_size", num_envs if batch_size is None else batch_size, num_envs)
        if batch_size % k:
            raise ValueError(f"batch_size must be a multiple of K={k} envs per worker, got {batch_size}")
        for name, value in (("step_timeout_s", step_timeout_s), ("start_timeout_s", start_timeout_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if context not in CONTEXTS:
            raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
        self.num_envs, self.envs_per_worker, self.batch_size = num_envs, k, batch_size
        self.step_timeout_s, self.start_timeout_s = float(step_timeout_s), float(start_timeout_s)
        self.max_restarts, self.copy, self._metrics = max_restarts, copy, metrics
        self.healthy_steps = _check_positive_int("healthy_steps", healthy_steps, 1 << 62)
        self.restarts = dict.fromkeys(RESTART_REASONS, 0)
        """Worker restarts by reason."""
        self.env_id = env_fn if isinstance(env_fn, str) else "?"
        """The env's id (or class name), used in error messages."""
        self._ctx = get_context(context)
        self._specs = self._env_specs(env_fn, env_kwargs, num_envs, num_workers, k)
        self._workers = [WorkerHandle(i, slice(i * k, (i + 1) * k)) for i in range(num_workers)]
        self._finalizer = weakref.finalize(self, shutdown, self._workers)
        self._taken: list[TakenStep] = []
        self._needs_reset = True
        self._seed_base: int | None = None
        self._restart_count = [0] * num_workers
        try:
            self._start_all()
        except WorkerFault as fault:
            self._finalizer()
            raise RuntimeError(f"an env worker of {self.env_id!r} {fault.reason} during start-up") from None
        except BaseException:
            self._finalizer()
            raise

    # ---- start-up --------------------------------------------------------------------------
    @staticmethod
    def _env_specs(env_fn: Any, env_kwargs: dict[str, Any] | None, n: int, w: int, k: int) -> list[bytes]:
        if isinstance(env_fn, str):
            return [pickle.dumps(("id", env_fn, dict(env_kwargs or {})))] * w
        if env_kwargs:
            raise ValueError("env_kwargs is for an env id; bind arguments with functools.partial instead")
        fns = list(env_fn) if isinstance(env_fn, Sequence) else [env_fn] * n
        if len(fns) != n or not all(callable(f) for f in fns):
            raise ValueError(f"env_fn must be an env id, a callable or {n} callables, got {env_fn!r:.200}")
        try:
            return [pickle.dumps(("fns", fns[i * k:(i + 1) * k])) for i in range(w)]
        except Exception as e:
            raise ValueError(f"env_fn must be picklable (a top-level function or class, or a functools.partial): {e}") from e

    def _start_all(self) -> None:
        for w in self._workers:
            w.spawn(self._ctx, self._specs[w.index])
        deadline = time.monotonic() + self.start_timeout_s
        hellos = [self._hello(w, deadline) for w in self._workers]
        first = hellos[0]
        self.env_id = str(first["env_id"])
        spaces_ = (first["observation_space"], first["action_space"])
        for h in hellos:
            if h["mismatch"] or (h["observation_space"], h["action_space"]) != spaces_:
                raise ValueError(f"all envs must share their spaces; env {self.env_id!r} differs at env {h['mismatch'] or '?'}")
        self.single_observation_space, self.single_action_space = spaces_
        self._obs_spec = _array_spec(self.single_observation_space, "observation", self.env_id)
        self._act_spec = _array_spec(self.single_action_space, "action", self.env_id)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**first["metadata"], "autoreset_mode": AutoresetMode.SAME_STEP}
        self.render_mode = first["render_mode"]
        layout, size = proto.buffer_layout(self.envs_per_worker, self._obs_spec, self._act_spec)
        token = secrets.token_hex(3)
        for w in self._workers:
            w.views = proto.buffer_views(w.share(size, f"mrl{os.getpid()}_{token}_{w.index}"), layout)
            self._attach(w)
        obs_shape, obs_dtype = self._obs_spec
        self._obs = np.zeros((self.num_envs, *obs_shape), dtype=obs_dtype)
        self._rewards = np.zeros(self.num_envs, dtype=np.float64)
        self._terminated = np.zeros(self.num_envs, dtype=np.bool_)
        self._truncated = np.zeros(self.num_envs, dtype=np.bool_)

    def _hello(self, w: WorkerHandle, deadline: float) -> dict[str, Any]:
        report = w.hello(deadline)
        if not report["ok"]:
            raise EnvError(report["env_index"], "construction", report["traceback"], report["env_id"])
        return report

    def _attach(self, w: WorkerHandle) -> None:
        assert w.shm is not None
        w.send([proto.ATTACH, w.shm.name, list(self._obs_spec), list(self._act_spec)], None)

    # ---- faults ----------------------------------------------------------------------------
    def _restart(self, w: WorkerHandle, reason: str, seeds: list[int | None] | None,
                 options: dict[str, Any] | None) -> dict[int, Any]:
        """Replace a dead or hung worker and reset its envs; return their reset infos.

        A crash loop is caught whatever its period: a worker's failures are forgotten only once
        it has taken ``healthy_steps`` steps without one, and its failure after ``max_restarts``
        restarts without such a healthy stretch closes the pool (:class:`WorkerCrashError`).
        """
        while True:
            how = self._how_it_failed(w, reason)
            w.stop(0.0)
            self.restarts[reason] += 1
            if self._metrics is not None:
                self._metrics.add_env_worker_restart(reason)
            w.failures += 1
            w.steps_since_failure = 0
            envs = f"envs {w.envs.start}-{w.envs.stop - 1}"
            if w.failures > self.max_restarts:
                self.close()
                raise WorkerCrashError(
                    f"env worker {w.index} ({envs} of {self.env_id!r}) {reason} ({how}) {w.failures} "
                    f"times with fewer than {self.healthy_steps} steps between failures; the pool is closed"
                )
            log.warning("env worker %d (%s) %s (%s): restarting it", w.index, envs, reason, how)
            self._restart_count[w.index] += 1
            if seeds is None and self._seed_base is not None:  # reproducible, and new each time
                base = self._seed_base + self.num_envs * self._restart_count[w.index]
                seeds = list(range(base + w.envs.start, base + w.envs.stop))
            try:
                w.spawn(self._ctx, self._specs[w.index])
                hello = self._hello(w, time.monotonic() + self.start_timeout_s)
                if (hello["observation_space"], hello["action_space"]) != (self.single_observation_space, self.single_action_space):
                    self.close()
                    raise RuntimeError(f"restarted env worker {w.index} of {self.env_id!r} built envs with other spaces")
                self._attach(w)
                w.send([proto.RESET, seeds or [None] * self.envs_per_worker, options], proto.RESET, self.step_timeout_s)
                while not (ready := wait_ready([w], math.inf)):
                    pass
            except WorkerFault as fault:
                reason = fault.reason
                continue
            _, reply, fault_reason = ready[0]
            w.pending, w.deadline = None, math.inf
            if fault_reason is not None:
                reason = fault_reason
                continue
            if reply[0] == proto.ERR:  # an env that cannot even reset: no point in going on
                self.close()
                raise self._env_error(reply)
            return dict(reply[1])

    def _how_it_failed(self, w: WorkerHandle, reason: str) -> str:
        """A dead worker's end once reaped (``killed by SIGSEGV``), or the timeout it missed."""
        if w.child is None:
            return "not running"
        if reason == "timeout":
            return f"no reply within {self.step_timeout_s:g}s"
        return w.child.exit_description()

    def _env_error(self, reply: list[Any]) -> EnvError:
        _, env_index, method, tb = reply
        return EnvError(env_index, method, tb, self.env_id)

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"ProcessVecEnv of {self.env_id!r} is closed")

    def _pending(self, op: str) -> list[WorkerHandle]:
        return [w for w in self._workers if w.pending == op]

    def _drain(self) -> None:
        """Discard replies still in flight (restarting workers that died meanwhile)."""
        self._taken.clear()
        while pending := [w for w in self._workers if w.pending is not None]:
            for w, _, fault in wait_ready(pending, math.inf):
                w.pending, w.deadline = None, math.inf
                if fault is not None:
                    self._restart(w, fault, None, None)

    # ---- views, closing --------------------------------------------------------------------
    def shared_arrays(self, worker: int) -> dict[str, np.ndarray]:
        """NumPy views of worker ``worker``'s shared block (``obs``, ``final_obs``, ``actions``,
        ``rewards``, ``terminated``, ``truncated``; K rows each), valid until :meth:`close`."""
        return dict(self._workers[worker].views)

    def shared_tensors(self, worker: int) -> dict[str, torch.Tensor]:
        """:meth:`shared_arrays` as torch tensors on the same memory (no copy)."""
        return {name: torch.from_numpy(a) for name, a in self._workers[worker].views.items()}

    @property
    def num_workers(self) -> int:
        """Worker processes (each hosting ``envs_per_worker`` envs)."""
        return len(self._workers)

    @property
    def shared_memory_names(self) -> list[str]:
        """Names of the shared blocks (``/dev/shm/<name>`` on Linux)."""
        return [w.shm.name for w in self._workers if w.shm is not None]

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the running workers."""
        return [w.child.pid for w in self._workers if w.child is not None and w.child.pid]

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the workers (politely, then by SIGKILL after a second) and unlink the blocks."""
        self._taken.clear()
        self._finalizer()
