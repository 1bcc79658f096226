"""Simulator throughput: the batched sim (eager and compiled) against two baselines, one run.

Baselines, measured in the same run on the same machine:
- ``reference``: the scalar reference simulator (sim/reference.py) stepped in a Python loop in
  one process, both fighters acting;
- ``async2``: the reference wrapped as a Gymnasium env (red against pursuit) in
  ``gymnasium.vector.AsyncVectorEnv`` with 2 worker processes (the SubprocVecEnv approach).

Counting: a *physics env-step* is one environment advanced by one physics step (dt); an
*agent-step* is one decision of one acting fighter (both sides act in the batched sim and the
reference loop; only red acts in the Gymnasium baseline). Actions are random (fire with
probability 0.05 per decision), drawn in advance so their generation is not timed.

Usage: ``python bench/sim.py [--quick] [--device cpu|cuda] [--sizes 1,256,4096,65536]``.
The last line printed is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim import BatchedSim, SimConfig
from sim.reference import ReferenceSim
from sim.scenarios import initial_conditions

FIRE_P = 0.05


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _action_bank(n: int, device: torch.device, count: int = 16) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    bank = []
    for _ in range(count):
        rudder = torch.randint(0, 3, (n, 2), generator=gen)
        throttle = torch.randint(0, 3, (n, 2), generator=gen)
        fire = (torch.rand(n, 2, generator=gen) < FIRE_P).long()
        bank.append(torch.stack([rudder, throttle, fire], dim=-1).to(device))
    return bank


def bench_batched(n: int, device: torch.device, compile: bool, min_time_s: float) -> dict[str, float]:
    """Decision steps of ``n`` environments; returns rates and the first-call (compile) time."""
    config = SimConfig()
    sim = BatchedSim(n, config=config, device=device, seed=0, compile=compile)
    sim.reset()
    bank = _action_bank(n, device)
    t0 = time.perf_counter()
    sim.step(bank[0])
    _sync(device)
    first_call_s = time.perf_counter() - t0
    for i in range(3):
        sim.step(bank[i % len(bank)])
    _sync(device)
    steps, start = 0, time.perf_counter()
    while True:
        sim.step(bank[steps % len(bank)])
        steps += 1
        if steps >= 3 and steps % 4 == 0:
            _sync(device)
            elapsed = time.perf_counter() - start
            if elapsed >= min_time_s:
                break
    decisions_per_s = steps * n / elapsed
    return {
        "physics_env_steps_per_s": decisions_per_s * config.physics_steps_per_decision,
        "agent_steps_per_s": decisions_per_s * 2,
        "first_call_s": first_call_s,
    }


def bench_reference_loop(min_time_s: float) -> dict[str, float]:
    """The scalar reference, one environment, in a plain Python loop."""
    config = SimConfig()
    rng = random.Random(0)
    ref = ReferenceSim(config)
    episode = 0
    ref.reset(initial_conditions(config, 0, 0, episode))
    decisions, start = 0, time.perf_counter()
    while True:
        acts = [(rng.randrange(3), rng.randrange(3), int(rng.random() < FIRE_P)) for _ in range(2)]
        r = ref.step(acts)
        decisions += 1
        if r.terminated or r.truncated:
            episode += 1
            ref.reset(initial_conditions(config, 0, 0, episode))
        if decisions % 50 == 0 and time.perf_counter() - start >= min_time_s:
            break
    rate = decisions / (time.perf_counter() - start)
    return {"physics_env_steps_per_s": rate * config.physics_steps_per_decision, "agent_steps_per_s": rate * 2}


def bench_async_vector_env(min_time_s: float, workers: int = 2) -> dict[str, float]:
    """The reference as a Gymnasium env in AsyncVectorEnv with ``workers`` processes."""
    import gymnasium

    from sim.reference_gym import make_reference_env

    config = SimConfig()
    env = gymnasium.vector.AsyncVectorEnv([make_reference_env] * workers)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        actions = [env.action_space.sample() for _ in range(64)]
        for a in actions[:4]:
            env.step(a)
        steps, start = 0, time.perf_counter()
        while True:
            env.step(actions[steps % len(actions)])
            steps += 1
            if steps % 20 == 0 and time.perf_counter() - start >= min_time_s:
                break
        rate = steps * workers / (time.perf_counter() - start)
    finally:
        env.close()
    return {"physics_env_steps_per_s": rate * config.physics_steps_per_decision, "agent_steps_per_s": rate}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, short timings (< 1 min on a 2-core CPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", default=None, help="comma-separated batch sizes")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled runs")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    elif args.quick:
        sizes = [4096]
    elif device.type == "cuda":
        sizes = [1, 256, 4096, 65536, 1 << 20, 1 << 22]
    else:
        sizes = [1, 256, 4096, 65536]
    min_time = 1.0 if args.quick else 3.0

    print(f"device={device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else platform.processor() or platform.machine()}), "
          f"torch {torch.__version__}, threads={torch.get_num_threads()}")
    ref = bench_reference_loop(min_time)
    print(f"reference loop (1 process)      : {ref['physics_env_steps_per_s']:>14,.0f} physics env-steps/s  {ref['agent_steps_per_s']:>12,.0f} agent-steps/s")
    vec = bench_async_vector_env(min_time)
    print(f"AsyncVectorEnv (2 processes)    : {vec['physics_env_steps_per_s']:>14,.0f} physics env-steps/s  {vec['agent_steps_per_s']:>12,.0f} agent-steps/s")
    print()
    print(f"{'N':>9} {'mode':>9} {'physics env-steps/s':>20} {'agent-steps/s':>15} {'x reference':>12} {'x async2':>9} {'1st call s':>10}")
    results: dict[tuple[int, str], dict[str, float]] = {}
    modes = ["eager"] if args.no_compile else ["eager", "compiled"]
    for n in sizes:
        for mode in modes:
            r = bench_batched(n, device, mode == "compiled", min_time)
            results[(n, mode)] = r
            print(f"{n:>9} {mode:>9} {r['physics_env_steps_per_s']:>20,.0f} {r['agent_steps_per_s']:>15,.0f} "
                  f"{r['physics_env_steps_per_s'] / ref['physics_env_steps_per_s']:>12,.1f} "
                  f"{r['physics_env_steps_per_s'] / vec['physics_env_steps_per_s']:>9,.1f} {r['first_call_s']:>10.1f}")
        if "compiled" in modes:
            ratio = results[(n, "compiled")]["physics_env_steps_per_s"] / results[(n, "eager")]["physics_env_steps_per_s"]
            print(f"{n:>9} compiled/eager = {ratio:.2f}x")

    top = max(sizes)
    best_mode = "compiled" if "compiled" in modes else "eager"
    best = results[(top, best_mode)]["physics_env_steps_per_s"]
    fields = {
        "device": device.type,
        "n": top,
        "mode": best_mode,
        "physics_env_steps_per_s": f"{best:.4g}",
        "agent_steps_per_s": f"{results[(top, best_mode)]['agent_steps_per_s']:.4g}",
        "x_reference": f"{best / ref['physics_env_steps_per_s']:.1f}",
        "x_async2": f"{best / vec['physics_env_steps_per_s']:.1f}",
    }
    if "compiled" in modes:
        fields["compiled_over_eager"] = f"{best / results[(top, 'eager')]['physics_env_steps_per_s']:.2f}"
    print("RESULT " + " ".join(f"{k}={v}" for k, v in fields.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
