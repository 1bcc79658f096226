"""``ProcessVecEnv``: any Gymnasium env in worker processes, EnvPool-style.

W worker processes each host K = num_envs / W environments and step them in a loop, so one
message moves K env-steps. Observations, final observations, rewards, terminated, truncated and
actions live in one shared-memory block per worker; the pipes carry only small msgpack control
messages (``actors/workers/env_worker.py``: the worker side and the protocol). Two ways to step:

- sync, the ``gymnasium.vector.VectorEnv`` API: ``reset(seed=s)`` seeds env i with s + i, so the
  same seeds give the same trajectories for any W; ``step(actions)`` steps every env;
- async: ``send(actions, env_ids)`` then ``recv()``, which returns the first ``batch_size`` envs
  whose workers have replied (whole workers; ``env_ids`` says which), so a slow worker never
  stalls the others. ``recv(timeout=0)`` never blocks: it returns ``None`` until a batch is
  complete, keeping what it took. From asyncio, ``await pool.recv_async()``, or by hand::

      ready = asyncio.Event()
      for fd in pool.ready_fds():      # workers with a step in flight: a reply or a death
          loop.add_reader(fd, ready.set)
      # await ready.wait() with a timeout of pool.step_timeout_s (a hung worker makes no fd
      # readable), remove the readers, then batch = pool.recv(timeout=0) (None: not yet a
      # whole batch; wait again). Take ready_fds() anew each time: they change with what is
      # in flight and with restarts.

Autoreset is same-step (``gymnasium.vector.AutoresetMode.SAME_STEP``) with the infos of
``SyncVectorEnv``: a finished env's returned obs is its reset obs, and ``infos["final_obs"]``,
``infos["final_info"]`` and the masks ``infos["_final_obs"]``, ``infos["_final_info"]`` hold
the last step's. A worker that dies or hangs past ``step_timeout_s`` is killed and restarted;
its envs are reset and their episodes reported truncated, with the last obs seen as final obs
and ``final_info["worker_restart"]`` the reason (counted in ``restarts`` and in
``midrange_env_worker_restarts_total``). An env that raises is an ``EnvError`` naming the env
and carrying the worker's traceback; ``reset()`` is then needed.

With the spawn start method each worker also imports the main script, as Python's
multiprocessing does: keep its top-level imports light, or use ``context="forkserver"``.
"""

from __future__ import annotations

import asyncio
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
from multiprocessing.shared_memory import SharedMemory
from typing import Any, NamedTuple

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from actors.workers import env_worker as proto
from actors.workers.env_worker import EnvError, WorkerFault, WorkerHandle, wait_ready
from monitoring.facade import Metrics

log = logging.getLogger(__name__)

CONTEXTS = ("spawn", "forkserver")
"""Start methods: fork is refused (a forked process of a threaded torch parent can deadlock)."""
RESTART_REASONS = ("died", "timeout")
"""Why a worker was restarted: its process ended, or a reply took longer than ``step_timeout_s``."""

EnvFn = Callable[[], gymnasium.Env]

__all__ = ["EnvError", "ProcessVecEnv", "StepBatch", "WorkerCrashError"]


class WorkerCrashError(RuntimeError):
    """A worker kept dying or hanging through ``max_restarts`` restarts in a row: the pool is closed."""


class StepBatch(NamedTuple):
    """What :meth:`ProcessVecEnv.recv` returns: row i of each array belongs to env ``env_ids[i]``."""

    obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: dict[str, Any]
    env_ids: np.ndarray


@dataclass
class _Taken:
    """A worker's step results, copied out of its block, not yet returned by recv()."""

    worker: WorkerHandle
    infos: dict[int, list[Any]]  # local env -> [info, final_info or None]
    final_obs: dict[int, np.ndarray]


class _InfoRows(VectorEnv):
    """Gymnasium's own info batching (``VectorEnv._add_info``: arrays plus ``_key`` masks) for
    ``n`` rows, so infos match ``SyncVectorEnv``'s exactly."""

    def __init__(self, n: int) -> None:
        self.num_envs = n


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


class ProcessVecEnv(VectorEnv):
    """Gymnasium envs stepped in worker processes through shared memory.

    Args:
        env_fn: a registered env id (made with ``gymnasium.make(env_fn, **env_kwargs)`` in the
            workers), a picklable zero-argument callable (a top-level function or class, a
            ``functools.partial``), or a sequence of ``num_envs`` of them; pickled once per
            worker start.
        num_envs: environments in all.
        num_workers: worker processes; must divide ``num_envs``. Default: the largest divisor
            of ``num_envs`` not above the usable CPU count.
        batch_size: envs :meth:`recv` returns (a multiple of K = num_envs / num_workers;
            default ``num_envs``).
        env_kwargs: keyword arguments of ``gymnasium.make`` when ``env_fn`` is an id.
        step_timeout_s: a worker whose reply (to a step of its K envs, a reset or a call)
            takes longer is killed and restarted (reason ``timeout``).
        start_timeout_s: time a worker may take to import and build its envs.
        max_restarts: restarts of one worker without a successful step in between before the
            pool gives up (:class:`WorkerCrashError`).
        context: ``"spawn"`` or ``"forkserver"``.
        copy: False returns the pool's own arrays from :meth:`reset` and :meth:`step`
            (overwritten by the next call).
        metrics: restarts are counted in ``metrics.add_env_worker_restart(reason)``.
    """

    def __init__(
        self, env_fn: str | EnvFn | Sequence[EnvFn], num_envs: int, num_workers: int | None = None, *,
        batch_size: int | None = None, env_kwargs: dict[str, Any] | None = None,
        step_timeout_s: float = 60.0, start_timeout_s: float = 120.0, max_restarts: int = 3,
        context: str = "spawn", copy: bool = True, metrics: Metrics | None = None,
    ) -> None:
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
        self.restarts = dict.fromkeys(RESTART_REASONS, 0)
        """Worker restarts by reason."""
        self.env_id = env_fn if isinstance(env_fn, str) else "?"
        """The env's id (or class name), used in error messages."""
        self._ctx = get_context(context)
        self._specs = self._env_specs(env_fn, env_kwargs, num_envs, num_workers, k)
        self._workers = [WorkerHandle(i, slice(i * k, (i + 1) * k)) for i in range(num_workers)]
        self._finalizer = weakref.finalize(self, proto.shutdown, self._workers)
        self._taken: list[_Taken] = []
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
            w.shm = SharedMemory(create=True, size=size, name=f"mrl{os.getpid()}_{token}_{w.index}")
            w.views = proto.buffer_views(w.shm, layout)
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

        Gives up (closing the pool) after ``max_restarts`` restarts without a successful step.
        """
        while True:
            code = w.process.exitcode if w.process is not None else None
            w.stop(0.0)
            self.restarts[reason] += 1
            if self._metrics is not None:
                self._metrics.add_env_worker_restart(reason)
            w.failures += 1
            envs = f"envs {w.envs.start}-{w.envs.stop - 1}"
            if w.failures > self.max_restarts:
                self.close()
                raise WorkerCrashError(
                    f"env worker {w.index} ({envs} of {self.env_id!r}) {reason} (exit code {code}) "
                    f"{w.failures} times without a successful step in between; the pool is closed"
                )
            log.warning("env worker %d (%s) %s (exit code %s): restarting it", w.index, envs, reason, code)
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

    # ---- sync API --------------------------------------------------------------------------
    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env: ``seed`` s gives env i the seed s + i; a list gives one per env."""
        self._check_open()
        if seed is None or isinstance(seed, (int, np.integer)):
            self._seed_base = None if seed is None else int(seed)
            seeds: list[int | None] = [None if seed is None else int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = [None if s is None else int(s) for s in seed]
            self._seed_base = None
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed must be an int, None or {self.num_envs} seeds, got {len(seeds)}")
        self._drain()
        self._needs_reset = True
        for w in self._workers:
            w.send([proto.RESET, seeds[w.envs], options], proto.RESET, self.step_timeout_s)
        infos: dict[str, Any] = {}
        rows = _InfoRows(self.num_envs)
        error: EnvError | None = None
        while pending := self._pending(proto.RESET):
            for w, reply, fault in wait_ready(pending, math.inf):
                w.pending, w.deadline = None, math.inf
                if fault is not None:
                    per_env = self._restart(w, fault, seeds[w.envs], options)
                elif reply[0] == proto.ERR:
                    error = error or self._env_error(reply)
                    continue
                else:
                    per_env = reply[1]
                self._obs[w.envs] = w.views["obs"]
                for j, info in per_env.items():
                    infos = rows._add_info(infos, info, w.envs.start + j)
        if error is not None:
            raise error
        self._needs_reset = False
        return (self._obs.copy() if self.copy else self._obs), infos

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env with ``actions`` (one row per env) and wait for all of them."""
        self.send(actions)
        taken: list[_Taken] = []
        error: EnvError | None = None
        while pending := self._pending(proto.STEP):
            for w, reply, fault in wait_ready(pending, math.inf):
                try:
                    taken.append(self._take(w, reply, fault))
                except EnvError as e:  # keep collecting: no reply may stay in the pipes
                    error = error or e
        if error is not None:
            raise error
        taken.sort(key=lambda t: t.worker.index)
        infos = self._infos(taken, self.num_envs)
        if not self.copy:
            return self._obs, self._rewards, self._terminated, self._truncated, infos
        return self._obs.copy(), self._rewards.copy(), self._terminated.copy(), self._truncated.copy(), infos

    # ---- async API -------------------------------------------------------------------------
    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Start stepping ``env_ids`` (whole workers; default all envs) with ``actions`` (one row
        per env id, in that order). ``actions=None``: they are already in the shared blocks."""
        self._check_open()
        if self._needs_reset:
            raise RuntimeError("call reset() first (before the first step and after an env error)")
        k = self.envs_per_worker
        workers = self._workers if env_ids is None else self._workers_of(env_ids)
        busy = [w.index for w in workers if w.pending is not None]
        if busy or any(t.worker in workers for t in self._taken):
            raise RuntimeError(f"envs of worker(s) {busy or 'taken'} are still in flight: recv() them first")
        if actions is not None:
            acts = self._check_actions(actions, k * len(workers))
            for i, w in enumerate(workers):
                w.views["actions"][...] = acts[i * k:(i + 1) * k]
        message = proto.pack([proto.STEP])
        for w in workers:
            w.send(message, proto.STEP, self.step_timeout_s)

    def _workers_of(self, env_ids: Sequence[int] | np.ndarray) -> list[WorkerHandle]:
        k = self.envs_per_worker
        # Plain Python on the ids: cheaper than NumPy checks at batch sizes of a few dozen.
        ids = np.asarray(env_ids).reshape(-1).tolist()
        firsts = ids[::k]
        whole = bool(ids) and len(ids) % k == 0 and all(isinstance(f, int) and f % k == 0 and 0 <= f < self.num_envs for f in firsts) \
            and len(set(firsts)) == len(firsts) and ids == [f + j for f in firsts for j in range(k)]
        if not whole:
            raise ValueError(f"env_ids must list whole workers' envs in order (K={k}: 0..{k - 1}, "
                             f"{k}..{2 * k - 1}, ...), got {ids!r:.200}")
        return [self._workers[f // k] for f in firsts]

    def _check_actions(self, actions: Any, n: int) -> np.ndarray:
        if isinstance(actions, torch.Tensor):
            actions = actions.detach().cpu().numpy()
        acts = np.asarray(actions)
        shape, dtype = self._act_spec
        if acts.shape != (n, *shape):
            raise ValueError(f"actions must have shape {(n, *shape)} for {self.single_action_space}, got {acts.shape}")
        if np.dtype(dtype).kind in "iub" and acts.dtype.kind not in "iub":
            raise ValueError(f"actions for {self.single_action_space} must be integers, got {acts.dtype}")
        return acts

    def recv(self, timeout: float | None = None) -> StepBatch | None:
        """The first ``batch_size`` envs whose steps are done (fewer only when no more are in
        flight). With a ``timeout`` (0: never block) it returns None when the batch is not
        complete by then; what it took so far is kept for the next call."""
        self._check_open()
        until = math.inf if timeout is None else time.monotonic() + max(0.0, timeout)
        k = self.envs_per_worker
        while k * len(self._taken) < self.batch_size:
            pending = self._pending(proto.STEP)
            if not pending:
                if not self._taken:
                    raise RuntimeError("recv() has nothing in flight: send() actions first")
                break
            for w, reply, fault in wait_ready(pending, until):
                self._taken.append(self._take(w, reply, fault))
            if time.monotonic() >= until and k * len(self._taken) < self.batch_size:
                return None
        # Oldest first; replies beyond the batch stay taken for the next call.
        count = min(len(self._taken), self.batch_size // k)
        taken, self._taken = self._taken[:count], self._taken[count:]
        rows = [t.worker.envs for t in taken]
        ids = np.concatenate([np.arange(r.start, r.stop) for r in rows])
        # Slices of whole workers, joined: cheaper than fancy indexing, and a copy either way.
        obs, rewards, terminated, truncated = (
            np.concatenate([a[r] for r in rows]) for a in (self._obs, self._rewards, self._terminated, self._truncated)
        )
        return StepBatch(obs, rewards, terminated, truncated, self._infos(taken, len(ids)), ids)

    def _take(self, w: WorkerHandle, reply: Any, fault: str | None) -> _Taken:
        """Copy a worker's step results out of its block (or make them up after a fault)."""
        w.pending, w.deadline = None, math.inf
        s = w.envs
        if fault is not None:
            last = self._obs[s].copy()
            resets = self._restart(w, fault, None, None)
            self._obs[s] = w.views["obs"]
            self._rewards[s], self._terminated[s], self._truncated[s] = 0.0, False, True
            infos = {j: [resets.get(j, {}), {"worker_restart": fault}] for j in range(self.envs_per_worker)}
            return _Taken(w, infos, dict(enumerate(last)))
        if reply[0] == proto.ERR:
            self._needs_reset = True
            raise self._env_error(reply)
        w.failures = 0
        v = w.views
        self._obs[s], self._rewards[s] = v["obs"], v["rewards"]
        self._terminated[s], self._truncated[s] = v["terminated"], v["truncated"]
        infos = reply[1]
        final = {j: v["final_obs"][j].copy() for j, (_, fin) in infos.items() if fin is not None} if infos else {}
        return _Taken(w, infos, final)

    def _infos(self, taken: list[_Taken], n: int) -> dict[str, Any]:
        infos: dict[str, Any] = {}
        if not any(t.infos for t in taken):
            return infos
        rows = _InfoRows(n)
        for first, t in zip(range(0, n, self.envs_per_worker), taken, strict=True):
            for j in sorted(t.infos):  # env order, as SyncVectorEnv adds them
                info, final_info = t.infos[j]
                if final_info is not None:
                    infos = rows._add_info(infos, {"final_obs": t.final_obs[j], "final_info": final_info}, first + j)
                infos = rows._add_info(infos, info, first + j)
        return infos

    def ready_fds(self) -> list[int]:
        """Descriptors that turn readable when a worker with a step in flight replies or dies
        (for ``loop.add_reader``); take them anew after each :meth:`recv`."""
        return [fd for w in self._pending(proto.STEP) if w.conn is not None and w.process is not None
                for fd in (w.conn.fileno(), w.process.sentinel)]

    def poll_ready(self) -> int:
        """Envs whose results :meth:`recv` could return now, without blocking or receiving."""
        pending = self._pending(proto.STEP)
        ready = {w.index for w in pending if w.conn is not None and w.conn.poll()}
        ready |= {w.index for w in pending if time.monotonic() >= w.deadline or (w.process and not w.process.is_alive())}
        return self.envs_per_worker * (len(ready) + len(self._taken))

    async def recv_async(self) -> StepBatch:
        """:meth:`recv` for asyncio: waits on :meth:`ready_fds` instead of blocking the loop."""
        loop = asyncio.get_running_loop()
        while (batch := self.recv(timeout=0)) is None:
            ready = asyncio.Event()
            fds = self.ready_fds()
            for fd in fds:
                loop.add_reader(fd, ready.set)
            # A hung worker makes no descriptor readable: wake by the earliest deadline too.
            wait_s = min((w.deadline for w in self._pending(proto.STEP)), default=0.0) - time.monotonic()
            try:
                await asyncio.wait_for(ready.wait(), max(0.0, wait_s))
            except asyncio.TimeoutError:
                pass
            finally:
                for fd in fds:
                    loop.remove_reader(fd)
        return batch

    # ---- attributes, views, closing --------------------------------------------------------
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on every env (or read it, if not callable); arguments and results
        travel msgpack-encoded."""
        return self._call(name, "call", list(args), kwargs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of every env."""
        return self._call(name, "get", [], {})

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` of every env's unwrapped env: one value each, or one for all."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr needs {self.num_envs} values, got {len(values)}")
        self._call(name, "set", list(values), {})

    def _call(self, name: str, mode: str, args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        self._check_open()
        if self._pending(proto.STEP) or self._taken:
            raise RuntimeError(f"{mode} {name!r} while steps are in flight: recv() them first")
        for w in self._workers:
            per_worker = args[w.envs] if mode == "set" else args
            w.send([proto.CALL, name, mode, per_worker, kwargs], proto.CALL, self.step_timeout_s)
        results: list[Any] = [None] * self.num_envs
        error: Exception | None = None
        while pending := self._pending(proto.CALL):
            for w, reply, fault in wait_ready(pending, math.inf):
                w.pending, w.deadline = None, math.inf
                if fault is not None:
                    self._restart(w, fault, None, None)
                    self._needs_reset = True
                    error = error or RuntimeError(f"env worker {w.index} {fault} during {mode} {name!r}; restarted, reset() needed")
                elif reply[0] == proto.ERR:
                    error = error or self._env_error(reply)
                else:
                    results[w.envs] = reply[1]
        if error is not None:
            raise error
        return tuple(results)

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
        return [w.process.pid for w in self._workers if w.process is not None and w.process.pid]

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the workers (politely, then by SIGKILL after a second) and unlink the blocks."""
        self._taken.clear()
        self._finalizer()
