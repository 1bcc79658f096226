"""Env-steps per second of process-worker vector envs, every implementation in one run.

Rows, each on (a) ``CartPole-v1`` and (b) the scalar reference duel (``sim/reference/gym.py``,
red against pursuit, ``time_scale=4``: 20 physics steps, about a millisecond per env-step in
pure Python), at 16 and 64 envs, random actions drawn beforehand:

- ``ours sync``: :class:`actors.workers.process_vec_env.ProcessVecEnv`, ``step()`` of all envs;
- ``ours async``: the same pool with ``batch_size = envs / 2``: ``recv()`` the first half that
  is ready, ``send()`` its next actions (EnvPool style);
- ``SyncVectorEnv``: gymnasium's, in this process (same-step autoreset);
- ``AsyncVectorEnv``: gymnasium's, ``shared_memory=True``, one process per env;
- ``SubprocVecEnv``: Stable-Baselines3's, one process per env (skipped with a note when
  ``stable-baselines3`` is not installed: ``pip install -e ".[bench]"``).

All rows of an (env, envs) group are built, reset and warmed up (start-up is not timed), then
timed by wall clock over the same number of env-steps, in slices taken in turns, of which each
row keeps its best: on a shared machine a slice may lose the CPU to other jobs, and taking turns
lets such a burst hit every row alike. Each row also reports that: "other load" is the CPU time
(in cores) that processes outside the row used while its best slice ran, read from /proc;
"CPU us/step" is the CPU time of this process and the row's workers per env-step (the
overhead on top of the env's own work, whatever the load).

    python bench/workers.py            # about 2 minutes on 2 cores
    python bench/workers.py --quick    # shorter timing

The last line is ``RESULT key=value ...``: ours async over each baseline
(``cartpole16_x_async`` = ours async / AsyncVectorEnv on CartPole at 16 envs, ...).
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Spawned workers import this file as their __main__: heavy imports stay inside functions.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

IMPLS = ("SyncVectorEnv", "AsyncVectorEnv", "SubprocVecEnv", "ours sync", "ours async")
SLOW_TIME_SCALE = 4.0


def env_fn(env: str) -> Callable[[], Any]:
    """A picklable zero-argument factory of ``env`` (``cartpole`` or ``slow``)."""
    if env == "cartpole":
        import gymnasium

        return functools.partial(gymnasium.make, "CartPole-v1")
    from sim.reference.gym import make_reference_env

    return functools.partial(make_reference_env, time_scale=SLOW_TIME_SCALE)


def _actions(space: Any, n: int, count: int, seed: int) -> list[np.ndarray]:
    """``count`` batches of ``n`` random actions, drawn before timing."""
    space.seed(seed)
    return [np.stack([space.sample() for _ in range(n)]) for _ in range(count)]


def cycling_step(step_batch: Callable[[np.ndarray], Any], acts: list[np.ndarray], n: int) -> Callable[[], int]:
    """A ``step()`` that steps all ``n`` envs with the next of the pre-drawn action batches."""
    calls = 0

    def step() -> int:
        nonlocal calls
        calls += 1
        step_batch(acts[calls % len(acts)])
        return n

    return step


@dataclass
class Stepper:
    """One row's vector env, ready to time: ``step()`` advances it and returns the env-steps done."""

    step: Callable[[], int]
    pids: list[int]
    """Worker processes (their CPU time is the row's own, not other load)."""
    close: Callable[[], None]


def make_ours(env: str, n: int, batched: bool) -> Stepper:
    """ProcessVecEnv: ``step()`` of all envs, or (batched) ``recv()`` half and ``send()`` it on."""
    from actors.workers.process_vec_env import ProcessVecEnv

    pool = ProcessVecEnv("CartPole-v1" if env == "cartpole" else env_fn(env), n,
                         batch_size=n // 2 if batched else None)
    acts = _actions(pool.single_action_space, n, 64, seed=1)
    pool.reset(seed=0)
    calls = 0

    def recv_send() -> int:
        nonlocal calls
        calls += 1
        batch = pool.recv()
        assert batch is not None
        pool.send(acts[calls % 64][: len(batch.env_ids)], batch.env_ids)
        return len(batch.env_ids)

    if batched:
        pool.send(acts[0])
    return Stepper(recv_send if batched else cycling_step(pool.step, acts, n), pool.worker_pids, pool.close)


def make_gymnasium(env: str, n: int, kind: str) -> Stepper:
    """gymnasium's SyncVectorEnv, or AsyncVectorEnv with shared memory, same-step autoreset."""
    import gymnasium
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

    fn = env_fn(env)
    venv: gymnasium.vector.VectorEnv
    if kind == "SyncVectorEnv":
        venv, pids = SyncVectorEnv([fn] * n, autoreset_mode=AutoresetMode.SAME_STEP), []
    else:
        venv = AsyncVectorEnv([fn] * n, shared_memory=True, autoreset_mode=AutoresetMode.SAME_STEP)
        pids = [p.pid for p in venv.processes]
    acts = _actions(venv.single_action_space, n, 64, seed=1)
    venv.reset(seed=0)
    return Stepper(cycling_step(venv.step, acts, n), pids, venv.close)


def make_sb3(env: str, n: int) -> Stepper:
    """Stable-Baselines3's SubprocVecEnv (its default start method)."""
    from stable_baselines3.common.vec_env import SubprocVecEnv

    venv = SubprocVecEnv([env_fn(env)] * n)
    acts = _actions(venv.action_space, n, 64, seed=1)
    venv.seed(0)
    venv.reset()
    return Stepper(cycling_step(venv.step, acts, n), [p.pid for p in venv.processes], venv.close)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 where /proc cannot tell)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    """CPU seconds all cores spent busy since boot (0 without /proc/stat)."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def time_slice(stepper: Stepper, env_steps: int) -> tuple[float, float, float]:
    """Time ``env_steps`` env-steps: (env-steps per second, CPU seconds per env-step of this
    process and the row's workers, cores' worth of CPU that other processes used meanwhile)."""
    busy0, own0 = _machine_busy_s(), time.process_time() + sum(map(_cpu_s, stepper.pids))
    start, done = time.perf_counter(), 0
    while done < env_steps:
        done += stepper.step()
    wall = time.perf_counter() - start
    own = time.process_time() + sum(map(_cpu_s, stepper.pids)) - own0
    return done / wall, own / done, max(0.0, (_machine_busy_s() - busy0 - own) / wall)


def make(impl: str, env: str, n: int) -> Stepper:
    """The stepper of one row."""
    if impl.startswith("ours"):
        return make_ours(env, n, batched=impl == "ours async")
    if impl == "SubprocVecEnv":
        return make_sb3(env, n)
    return make_gymnasium(env, n, impl)


def measure_group(impls: list[str], env: str, n: int, env_steps: int, slices: int) -> dict[str, tuple[float, float, float, int]]:
    """Every implementation on (env, n): all built and warmed up first, then timed in
    ``slices`` rounds of one slice each, taking turns so that a burst of load elsewhere hits
    them alike; per implementation the best slice: (env-steps/s, CPU s per env-step, other
    load in cores, worker processes)."""
    steppers: dict[str, Stepper] = {}
    best: dict[str, tuple[float, float, float]] = {}
    try:
        for impl in impls:
            steppers[impl] = stepper = make(impl, env, n)
            done = 0
            while done < max(env_steps // 10, 5 * n):
                done += stepper.step()
        for _ in range(slices):
            for impl, stepper in steppers.items():
                best[impl] = max(best.get(impl, (0.0, 0.0, 0.0)), time_slice(stepper, env_steps // slices))
    finally:
        for stepper in steppers.values():
            stepper.close()
    return {impl: (*best[impl], len(steppers[impl].pids)) for impl in impls}


def have_sb3() -> bool:
    """Whether Stable-Baselines3 can be imported."""
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


def cpu_name() -> str:
    """The CPU model, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    """Run every row, print the table and the RESULT line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5x fewer timed env-steps")
    parser.add_argument("--envs", default="16,64", help="comma-separated env counts (default 16,64)")
    parser.add_argument("--only", default="cartpole,slow", help="comma-separated envs: cartpole, slow")
    parser.add_argument("--slices", type=int, default=3, help="timed slices per row, the best kept (default 3)")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.envs.split(",")]
    envs = args.only.split(",")
    # Env-steps timed per row, the same for every implementation of an (env, envs) pair.
    budget = {"cartpole": 100_000, "slow": 8_000}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"device: {cpu_name()}, {cores} usable cores, Python {platform.python_version()}; "
          f"load average at start {os.getloadavg()[0]:.2f}")
    sb3 = have_sb3()
    if not sb3:
        print("note: stable-baselines3 not installed: SubprocVecEnv rows skipped (pip install -e '.[bench]')")
    header = (f"{'env':8} {'envs':>4}  {'implementation':15} {'procs':>5} {'env-steps/s':>12} "
              f"{'x Sync':>7} {'x Async':>7} {'CPU us/step':>11}  other load")
    print(header + "\n" + "-" * len(header))
    rates: dict[tuple[str, int, str], float] = {}
    impls = [impl for impl in IMPLS if impl != "SubprocVecEnv" or sb3]
    for env in envs:
        for n in counts:
            env_steps = budget[env] // (5 if args.quick else 1)
            for impl, (rate, cpu, others, procs) in measure_group(impls, env, n, env_steps, args.slices).items():
                rates[(env, n, impl)] = rate
                ratios = [f"{rate / rates[(env, n, b)]:7.2f}" if (env, n, b) in rates else " " * 7
                          for b in ("SyncVectorEnv", "AsyncVectorEnv")]
                print(f"{env:8} {n:4d}  {impl:15} {procs:5d} {rate:12,.0f} {' '.join(ratios)} {cpu * 1e6:11,.1f}"
                      f"  {others:.2f} cores", flush=True)
    print(f"load average at end {os.getloadavg()[0]:.2f}; each row: the best of {args.slices} slices, the rows "
          f"of a group taking turns; 'other load': CPU used by processes outside the row during that slice")
    result = []
    for env in envs:
        for n in counts:
            ours = rates[(env, n, "ours async")]
            for base, key in (("SyncVectorEnv", "sync"), ("AsyncVectorEnv", "async"), ("SubprocVecEnv", "sb3")):
                if (env, n, base) in rates:
                    result.append(f"{env}{n}_x_{key}={ours / rates[(env, n, base)]:.2f}")
    print("RESULT " + " ".join(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
