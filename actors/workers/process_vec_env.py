"""``ProcessVecEnv``: any Gymnasium env in worker processes, EnvPool-style.

W worker processes each host K = num_envs / W environments and step them in a loop, so one
message moves K env-steps. Observations, final observations, rewards, terminated, truncated and
actions live in one shared-memory block per worker; the pipes carry only small msgpack control
messages (``actors/workers/env_protocol.py``; the worker side is ``actors/workers/env_worker.py``,
start-up and restarts ``actors/workers/env_worker_pool.py``). Two ways to step:

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

import math
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from actors.workers import env_protocol as proto
from actors.workers.env_worker_handle import EnvError, WorkerHandle, wait_ready
from actors.workers.env_worker_pool import EnvWorkerPool, TakenStep, WorkerCrashError
from actors.workers.supervision import wait_readable

__all__ = ["EnvError", "ProcessVecEnv", "StepBatch", "WorkerCrashError"]


class StepBatch(NamedTuple):
    """What :meth:`ProcessVecEnv.recv` returns: row i of each array belongs to env ``env_ids[i]``."""

    obs: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    infos: dict[str, Any]
    env_ids: np.ndarray


class _InfoRows(VectorEnv):
    """Gymnasium's own info batching (``VectorEnv._add_info``: arrays plus ``_key`` masks) for
    ``n`` rows, so infos match ``SyncVectorEnv``'s exactly."""

    def __init__(self, n: int) -> None:
        self.num_envs = n


class ProcessVecEnv(EnvWorkerPool):
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
        max_restarts: restarts of one worker without ``healthy_steps`` steps between two of
            its failures; its next failure closes the pool (:class:`WorkerCrashError`), so an
            env that crashes every few steps stops instead of restarting forever.
        healthy_steps: steps a worker must take without failing for its failures to be
            forgotten.
        context: ``"spawn"`` or ``"forkserver"``.
        copy: False returns the pool's own arrays from :meth:`reset` and :meth:`step`
            (overwritten by the next call).
        metrics: restarts are counted in ``metrics.add_env_worker_restart(reason)``.
    """

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
        taken: list[TakenStep] = []
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

    def _take(self, w: WorkerHandle, reply: Any, fault: str | None) -> TakenStep:
        """Copy a worker's step results out of its block (or make them up after a fault)."""
        w.pending, w.deadline = None, math.inf
        s = w.envs
        if fault is not None:
            last = self._obs[s].copy()
            resets = self._restart(w, fault, None, None)
            self._obs[s] = w.views["obs"]
            self._rewards[s], self._terminated[s], self._truncated[s] = 0.0, False, True
            infos = {j: [resets.get(j, {}), {"worker_restart": fault}] for j in range(self.envs_per_worker)}
            return TakenStep(w, infos, dict(enumerate(last)))
        if reply[0] == proto.ERR:
            self._needs_reset = True
            raise self._env_error(reply)
        w.steps_since_failure += 1
        if w.steps_since_failure >= self.healthy_steps:
            w.failures = 0
        v = w.views
        self._obs[s], self._rewards[s] = v["obs"], v["rewards"]
        self._terminated[s], self._truncated[s] = v["terminated"], v["truncated"]
        infos = reply[1]
        final = {j: v["final_obs"][j].copy() for j, (_, fin) in infos.items() if fin is not None} if infos else {}
        return TakenStep(w, infos, final)

    def _infos(self, taken: list[TakenStep], n: int) -> dict[str, Any]:
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
        return [fd for w in self._pending(proto.STEP) if w.child is not None for fd in w.child.fds()]

    def poll_ready(self) -> int:
        """Envs whose results :meth:`recv` could return now, without blocking or receiving."""
        pending = self._pending(proto.STEP)
        ready = {w.index for w in pending if w.child is not None and w.child.conn.poll()}
        ready |= {w.index for w in pending if time.monotonic() >= w.deadline or (w.child and not w.child.process.is_alive())}
        return self.envs_per_worker * (len(ready) + len(self._taken))

    async def recv_async(self) -> StepBatch:
        """:meth:`recv` for asyncio: waits on :meth:`ready_fds` instead of blocking the loop."""
        while (batch := self.recv(timeout=0)) is None:
            pending = self._pending(proto.STEP)
            # A hung worker makes no descriptor readable: wake by the earliest deadline too.
            wait_s = min((w.deadline for w in pending), default=0.0) - time.monotonic()
            await wait_readable([w.child for w in pending if w.child is not None], max(0.0, wait_s))
        return batch

    # ---- attributes ------------------------------------------------------------------------
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
