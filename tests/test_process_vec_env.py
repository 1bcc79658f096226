"""ProcessVecEnv with real worker processes: parity with SyncVectorEnv, seeding for any worker
count, EnvPool-style async receive, faults (exceptions, deaths, hangs), refusals and cleanup.

The test-only envs live in ``tests/envs_for_workers.py`` so spawned workers can import them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pytest
from envs_for_workers import CounterEnv, DictObsEnv, FaultyEnv, TextActionEnv
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from actors.workers.env_protocol import MAX_MESSAGE_BYTES
from actors.workers.process_vec_env import EnvError, ProcessVecEnv, WorkerCrashError
from monitoring import Metrics

ROOT = Path(__file__).resolve().parent.parent
SHM = Path("/dev/shm")
ZEROS = np.zeros(4, dtype=np.int64)


def assert_infos_equal(got: dict[str, Any], want: dict[str, Any], path: str = "infos") -> None:
    assert got.keys() == want.keys(), f"{path}: {sorted(got)} != {sorted(want)}"
    for key, w in want.items():
        g = got[key]
        if isinstance(w, dict):
            assert_infos_equal(g, w, f"{path}[{key!r}]")
        elif w.dtype == object:
            assert g.dtype == object and len(g) == len(w), f"{path}[{key!r}]"
            for a, b in zip(g, w, strict=True):
                assert (a is None) == (b is None), f"{path}[{key!r}]"
                if b is not None:
                    np.testing.assert_array_equal(a, b, err_msg=f"{path}[{key!r}]")
        else:
            assert g.dtype == w.dtype, f"{path}[{key!r}]: {g.dtype} != {w.dtype}"
            np.testing.assert_array_equal(g, w, err_msg=f"{path}[{key!r}]")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def counter_pool() -> Iterator[ProcessVecEnv]:
    # One factory per env, as SyncVectorEnv takes them.
    factories = [functools.partial(CounterEnv, length=1000 + i) for i in range(4)]
    with closing(ProcessVecEnv(factories, 4, num_workers=2)) as pool:
        yield pool


@pytest.mark.parametrize(("env_id", "steps"), [("CartPole-v1", 300), ("Pendulum-v1", 210)])
def test_steps_match_sync_vector_env_in_same_step_mode(env_id: str, steps: int) -> None:
    ref = SyncVectorEnv([functools.partial(gymnasium.make, env_id)] * 4, autoreset_mode=AutoresetMode.SAME_STEP)
    with closing(ProcessVecEnv(env_id, 4, num_workers=2)) as pool:
        assert pool.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        assert (pool.observation_space, pool.action_space) == (ref.observation_space, ref.action_space)
        obs, infos = pool.reset(seed=7)
        want_obs, want_infos = ref.reset(seed=7)
        np.testing.assert_array_equal(obs, want_obs)
        assert_infos_equal(infos, want_infos)
        ref.action_space.seed(3)
        episodes = 0
        for _ in range(steps):
            actions = ref.action_space.sample()
            got, want = pool.step(actions), ref.step(actions)
            for g, w in zip(got[:4], want[:4], strict=True):
                assert g.dtype == w.dtype
                np.testing.assert_array_equal(g, w)
            assert_infos_equal(got[4], want[4])
            assert pool.observation_space.contains(got[0])
            episodes += int(want[4].get("_final_obs", np.zeros(4, bool)).sum())
        assert episodes >= 4  # the autoreset path was compared too
    ref.close()


def test_same_seeds_give_the_same_trajectories_for_any_worker_count() -> None:
    actions = np.random.default_rng(0).integers(0, 2, (150, 4))
    runs = []
    for workers, context in ((1, "spawn"), (2, "spawn"), (4, "forkserver")):
        with closing(ProcessVecEnv("CartPole-v1", 4, num_workers=workers, context=context)) as pool:
            obs, _ = pool.reset(seed=123)
            run = [obs]
            for a in actions:
                run += pool.step(a)[:4]
        runs.append(run)
    for run in runs[1:]:
        for a, b in zip(runs[0], run, strict=True):
            np.testing.assert_array_equal(a, b)


def test_async_recv_returns_ready_envs_first_and_serves_asyncio() -> None:
    env = functools.partial(CounterEnv, length=1000, delay_s=1.0, slow_seeds=(2, 3))
    with closing(ProcessVecEnv(env, 4, num_workers=2, batch_size=2)) as pool:
        pool.reset(seed=0)
        start = time.monotonic()
        pool.send(np.array([0, 1, 2, 1]))
        for step in range(1, 4):  # the fast worker goes round three times meanwhile
            batch = pool.recv()
            assert batch is not None and batch.env_ids.tolist() == [0, 1]
            np.testing.assert_array_equal(batch.obs, [[0, step], [1, step]])
            assert batch.infos["vec"].dtype == np.int16 and batch.infos["vec"].tolist() == [[step, 2 * step]] * 2
            assert batch.infos["nested"]["t"].tolist() == [step, step]
            if step < 3:
                pool.send(np.array([1, 1]), env_ids=[0, 1])
        assert time.monotonic() - start < 1.0
        assert pool.recv(timeout=0) is None and pool.poll_ready() == 0
        batch = pool.recv()
        assert batch is not None and batch.env_ids.tolist() == [2, 3]
        assert batch.infos["action"].tolist() == [2, 1]

        async def by_hand_then_helper() -> tuple[Any, Any, int]:
            loop = asyncio.get_running_loop()
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            task = asyncio.create_task(ticker())
            pool.send(ZEROS)
            ready = asyncio.Event()
            fds = pool.ready_fds()
            for fd in fds:
                loop.add_reader(fd, ready.set)
            first = None
            while first is None:
                await asyncio.wait_for(ready.wait(), 5.0)
                ready.clear()
                first = pool.recv(timeout=0)
            for fd in fds:
                loop.remove_reader(fd)
            second = await pool.recv_async()
            task.cancel()
            return first, second, ticks

        first, second, ticks = asyncio.run(by_hand_then_helper())
        assert first.env_ids.tolist() == [0, 1] and second.env_ids.tolist() == [2, 3]
        assert ticks >= 10  # the loop kept running while the slow worker stepped


def test_api_attributes_shared_tensors_and_message_limit(counter_pool: ProcessVecEnv) -> None:
    pool = counter_pool
    obs, infos = pool.reset(seed=0)
    assert pool.observation_space.contains(obs) and infos["start"].tolist() == [0, 1, 2, 3]
    assert pool.get_attr("length") == (1000, 1001, 1002, 1003)
    pool.set_attr("length", [5, 6, 7, 8])
    assert pool.get_attr("length") == (5, 6, 7, 8)
    pool.set_attr("length", 1000)
    assert pool.get_attr("length") == (1000,) * 4
    assert pool.call("payload", 3) == (b"xxx",) * 4
    with pytest.raises(EnvError, match=f"exceeds the {MAX_MESSAGE_BYTES}-byte limit"):
        pool.call("payload", MAX_MESSAGE_BYTES)
    # Whichever worker replies first names its env: the first error wins, in reply order.
    with pytest.raises(EnvError, match=r"env \d \(CounterEnv\) raised in call 'observation_space' reply: TypeError: cannot msgpack-encode a Box"):
        pool.get_attr("observation_space")
    # Zero-copy views: actions written through a tensor are what the envs receive.
    tensors, arrays = pool.shared_tensors(1), pool.shared_arrays(1)
    assert tensors["obs"].data_ptr() == arrays["obs"].ctypes.data
    tensors["actions"].fill_(2)
    pool.send(None, env_ids=[2, 3])
    batch = pool.recv()
    assert batch is not None and batch.infos["action"].tolist() == [2, 2]
    np.testing.assert_array_equal(tensors["obs"].numpy(), batch.obs)


def test_bad_arguments_are_refused_by_name(counter_pool: ProcessVecEnv) -> None:
    with pytest.raises(ValueError, match="num_workers must divide num_envs=4, got 3"):
        ProcessVecEnv("CartPole-v1", 4, num_workers=3)
    with pytest.raises(ValueError, match="batch_size must be a multiple of K=2"):
        ProcessVecEnv("CartPole-v1", 4, num_workers=2, batch_size=3)
    with pytest.raises(ValueError, match="picklable"):
        ProcessVecEnv(lambda: CounterEnv(), 2)
    with pytest.raises(ValueError, match="context must be one of"):
        ProcessVecEnv("CartPole-v1", 2, context="fork")
    pool = counter_pool
    pool.reset(seed=0)
    with pytest.raises(ValueError, match="whole workers"):
        pool.send(np.zeros(2, np.int64), env_ids=[1, 2])
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        pool.send(np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="must be integers, got float64"):
        pool.send(np.zeros(4))
    with pytest.raises(RuntimeError, match="nothing in flight"):
        pool.recv()
    pool.send(ZEROS)
    with pytest.raises(RuntimeError, match="still in flight"):
        pool.send(ZEROS)
    pool.recv()


@pytest.mark.parametrize(
    ("env_fn", "message"),
    [
        (DictObsEnv, r"env 'DictObsEnv' has observation space Dict\("),
        (TextActionEnv, r"env 'TextActionEnv' has action space Text\("),
        ("Blackjack-v1", r"env 'Blackjack-v1' has observation space Tuple\("),
    ],
)
def test_unsupported_spaces_are_refused_naming_the_env_and_space(env_fn: Any, message: str) -> None:
    before = {p.pid for p in multiprocessing.active_children()}
    with pytest.raises(ValueError, match=message):
        ProcessVecEnv(env_fn, 2, num_workers=1)
    assert {p.pid for p in multiprocessing.active_children()} <= before


def test_an_env_exception_names_the_env_and_carries_the_worker_traceback() -> None:
    with closing(ProcessVecEnv(functools.partial(FaultyEnv, "raise", fault_seed=3, at_step=2), 4, num_workers=2)) as pool:
        pool.reset(seed=0)
        pool.step(ZEROS)
        with pytest.raises(EnvError) as caught:
            pool.step(ZEROS)
        err = caught.value
        assert (err.env_index, err.method) == (3, "step")
        assert "env 3 (FaultyEnv) raised in step: ValueError: boom at step 2" in str(err)
        assert "envs_for_workers.py" in err.worker_traceback and "Traceback" in err.worker_traceback
        with pytest.raises(RuntimeError, match="call reset"):
            pool.step(ZEROS)
        pool.reset(seed=10)  # env 3 now has seed 13: no fault
        pool.step(ZEROS)
        assert pool.restarts == {"died": 0, "timeout": 0}


@pytest.mark.parametrize("mode", ["exit", "segv"])
def test_a_dying_worker_is_restarted_and_its_episodes_truncated(mode: str, tmp_path: Path) -> None:
    metrics = Metrics()
    env = functools.partial(FaultyEnv, mode, fault_seed=1, at_step=3, marker=str(tmp_path / "fault"))
    with closing(ProcessVecEnv(env, 4, num_workers=2, metrics=metrics)) as pool:
        pool.reset(seed=0)
        for _ in range(2):
            last = pool.step(ZEROS)[0]
        old_pid = pool.worker_pids[0]
        pool.send(ZEROS)
        marker = tmp_path / "fault"  # written just before the worker dies
        give_up = time.monotonic() + 30.0
        while pool.poll_ready() < 4:
            assert time.monotonic() < give_up, "the worker's death was never seen"
            time.sleep(0.005)
        assert marker.exists() and time.time() - marker.stat().st_mtime < 1.0, "death not seen within a second"
        batch = pool.recv()
        assert batch is not None
        row = {int(e): i for i, e in enumerate(batch.env_ids)}
        for env in (0, 1):  # worker 0: both episodes cut short, both envs reset
            i = row[env]
            assert batch.truncated[i] and not batch.terminated[i] and batch.rewards[i] == 0.0
            np.testing.assert_array_equal(batch.infos["final_obs"][i], last[env])
            assert batch.infos["final_info"]["worker_restart"][i] == "died"
            assert batch.obs[i][1] == 0 and batch.infos["_start"][i]
        for env in (2, 3):  # worker 1 stepped on
            assert not batch.truncated[row[env]] and batch.obs[row[env]].tolist() == [env, 3]
        assert pool.restarts == {"died": 1, "timeout": 0}
        assert metrics.snapshot().env_worker_restarts == {"died": 1}
        assert pool.worker_pids[0] != old_pid and not alive(old_pid)
        obs = pool.step(ZEROS)[0]
        assert obs[:, 1].tolist() == [1, 1, 4, 4]


def test_a_hung_worker_is_killed_after_the_step_timeout(tmp_path: Path) -> None:
    env = functools.partial(FaultyEnv, "hang", fault_seed=3, at_step=2, marker=str(tmp_path / "fault"))
    with closing(ProcessVecEnv(env, 4, num_workers=2, step_timeout_s=1.0)) as pool:
        pool.reset(seed=0)
        pool.step(ZEROS)
        hung_pid = pool.worker_pids[1]
        start = time.monotonic()
        _, _, terminated, truncated, infos = pool.step(ZEROS)
        assert time.monotonic() - start >= 1.0
        assert truncated.tolist() == [False, False, True, True] and not terminated.any()
        assert infos["final_info"]["worker_restart"].tolist() == [None, None, "timeout", "timeout"]
        assert pool.restarts == {"died": 0, "timeout": 1} and not alive(hung_pid)


def test_an_env_that_cannot_be_built_is_named() -> None:
    with pytest.raises(EnvError, match=r"env 1 \(FaultyEnv\) raised in construction: ValueError: unknown mode 'nope'"):
        ProcessVecEnv([functools.partial(FaultyEnv, "raise"), functools.partial(FaultyEnv, "nope")], 2, num_workers=1)


def test_an_env_that_cannot_reset_stops_the_pool() -> None:
    with closing(ProcessVecEnv(functools.partial(FaultyEnv, "reset_raise"), 2, num_workers=1)) as pool:
        with pytest.raises(EnvError, match=r"env 0 \(FaultyEnv\) raised in reset: RuntimeError: reset refused") as caught:
            pool.reset(seed=0)
        assert "envs_for_workers.py" in caught.value.worker_traceback
        with pytest.raises(RuntimeError, match="call reset"):
            pool.step(np.zeros(2, np.int64))


def test_a_worker_that_keeps_dying_is_given_up() -> None:
    pool = ProcessVecEnv(functools.partial(FaultyEnv, "exit", fault_seed=None, at_step=1), 2, num_workers=1, max_restarts=2)
    names = pool.shared_memory_names
    pool.reset(seed=0)
    with pytest.raises(WorkerCrashError, match=r"env worker 0 \(envs 0-1 of 'FaultyEnv'\) died .* 3 times"):
        for _ in range(5):
            pool.step(np.zeros(2, np.int64))
    assert pool.closed and pool.restarts["died"] == 3 and pool.worker_pids == []
    assert not any((SHM / n).exists() for n in names)


def test_a_crash_loop_is_given_up_although_steps_succeed_in_between() -> None:
    """A worker that segfaults every third step takes successful steps between its crashes,
    but never ``healthy_steps`` of them: the pool gives up, naming the signal."""
    pool = ProcessVecEnv(functools.partial(FaultyEnv, "segv", fault_seed=None, at_step=3), 2, num_workers=1,
                         max_restarts=2, healthy_steps=50)
    pool.reset(seed=0)
    with pytest.raises(WorkerCrashError, match=r"env worker 0 \(envs 0-1 of 'FaultyEnv'\) died \(killed by SIGSEGV\) "
                                               r"3 times with fewer than 50 steps between failures"):
        for _ in range(30):
            pool.step(np.zeros(2, np.int64))
    assert pool.closed and pool.restarts["died"] == 3


def test_a_healthy_stretch_forgets_earlier_failures() -> None:
    # Crashes every third step, so two steps without one: a stretch of 2 healthy steps is enough.
    pool = ProcessVecEnv(functools.partial(FaultyEnv, "segv", fault_seed=None, at_step=3), 2, num_workers=1,
                         max_restarts=1, healthy_steps=2)
    with closing(pool):
        pool.reset(seed=0)
        for _ in range(9):
            pool.step(np.zeros(2, np.int64))
        assert pool.restarts["died"] == 3 and not pool.closed


@pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm")
def test_close_leaves_no_process_and_no_shared_memory() -> None:
    pool = ProcessVecEnv("CartPole-v1", 4, num_workers=2)
    names, pids = pool.shared_memory_names, pool.worker_pids
    assert len(names) == 2 and all((SHM / n).exists() for n in names) and all(map(alive, pids))
    held = pool.shared_tensors(0)["obs"]  # a view still held must not keep the block's name
    pool.close()
    pool.close()
    assert not any((SHM / n).exists() for n in names)
    assert not any(map(alive, pids)) and not {p.pid for p in multiprocessing.active_children()} & set(pids)
    assert held.shape == (2, 4)


@pytest.mark.skipif(not SHM.is_dir(), reason="needs /dev/shm")
def test_interpreter_exit_without_close_leaves_nothing() -> None:
    code = (
        "import json\n"
        "from actors.workers.process_vec_env import ProcessVecEnv\n"
        "pool = ProcessVecEnv('CartPole-v1', 2, num_workers=2)\n"
        "pool.reset(seed=0)\n"
        "print(json.dumps([pool.shared_memory_names, pool.worker_pids]), flush=True)\n"
        "raise SystemExit('left without close()')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 1 and "left without close()" in result.stderr, result.stderr
    names, pids = json.loads(result.stdout.splitlines()[-1])
    assert not any((SHM / n).exists() for n in names)
    assert not any(map(alive, pids))
    assert "leaked" not in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_workers_import_neither_torch_nor_the_actors_package(counter_pool: ProcessVecEnv) -> None:
    # Started by file path: a worker costs the env's imports, not the training stack's.
    assert counter_pool.call("has_module", "torch") == (False,) * 4
    assert counter_pool.call("has_module", "actors") == (False,) * 4
