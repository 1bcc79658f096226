"""Simulator throughput: the batched sim (eager and compiled) against two baselines, one run.

Baselines, measured in the same run on the same machine:
- ``reference``: the scalar reference simulator (sim/reference/scalar.py) stepped in a Python loop in
  one process, both fighters acting;
- ``async2``: the reference wrapped as a Gymnasium env (red against pursuit) in
  ``gymnasium.vector.AsyncVectorEnv`` with 2 worker processes (the SubprocVecEnv approach).

Counting: a *physics env-step* is one environment advanced by one physics step (dt); an
*agent-step* is one decision of one acting fighter (both sides act in the batched sim and the
reference loop; only red acts in the Gymnasium baseline). Actions are random (fire with
probability 0.05 per decision), drawn in advance so their generation is not timed.

Backends (``--backend``): ``torch`` rows run the tensor-op path eager and compiled; the
``native`` row runs the CPU kernel of sim/native/ (CPU only). By default the CPU runs all three.

Work (``--peer-work``): the default model (6 missiles per fighter, 5 physics steps of 0.1 s per
decision, 81 observation floats per side), or the work of the peer platform's Warp kernel that
issue 15 compares against: 1 missile per fighter and 10 physics steps of 0.1 s per decision
(``SimConfig(missiles_per_fighter=1, obs_incoming_missiles=1, obs_own_missiles=1,
substeps=10)``; 36 observation floats per side against its 21; our step still takes the turn
exactly and sweeps the hit test). The reference loop runs the same config as the rows; the
Gymnasium baseline always runs the default model.

On a CUDA device with Triton, a ``fused`` row runs the physics of a decision as one kernel
(sim/fused.py, ``BatchedSim(backend="triton")``) with the observations compiled, against the
``compiled`` row.

Usage: ``python bench/sim.py [--quick] [--peer-work] [--threads N] [--backend all|torch|native|triton]
[--device cpu|cuda] [--sizes 1,256,4096,65536] [--no-compile]``. The last line printed is
``RESULT key=value ...`` (with ``work=peer|default``, ``threads=`` and
``physics_env_steps_per_s=`` of the best row at the largest size).
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
from sim.fused import unsupported as fused_unsupported
from sim.reference.scalar import ReferenceSim
from sim.scenarios import initial_conditions

FIRE_P = 0.05
PEER_WORK = SimConfig(missiles_per_fighter=1, obs_incoming_missiles=1, obs_own_missiles=1, substeps=10)
"""The peer platform's work per decision: 1 missile per fighter, 10 physics steps of 0.1 s."""


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


def bench_batched(
    n: int, device: torch.device, mode: str, min_time_s: float, config: SimConfig
) -> dict[str, float]:
    """Decision steps of ``n`` environments in ``mode`` (``eager``, ``compiled``: the torch
    path; ``native``: the CPU kernel); returns rates and the first-call (compile) time."""
    backend = {"native": "native", "fused": "triton"}.get(mode, "torch")
    sim = BatchedSim(n, config=config, device=device, seed=0, compile=mode in ("compiled", "fused"),
                     backend=backend)
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


def profile_native(n: int, config: SimConfig, steps: int = 20) -> dict[str, float]:
    """Where a native decision step's time goes, ms per decision (wall clock), from timing the
    whole step, the kernel with and without its observation phase, on a sim in steady state."""
    sim = BatchedSim(n, config=config, seed=0, backend="native")
    sim.reset()
    bank = _action_bank(n, torch.device("cpu"))
    for i in range(100):  # into the steady state: missiles in flight, episodes ending
        sim.step(bank[i % len(bank)])
    kernel = sim._native
    assert kernel is not None

    def ms(fn: object) -> float:
        start = time.perf_counter()
        for i in range(steps):
            fn(i)  # type: ignore[operator]
        return (time.perf_counter() - start) / steps * 1e3

    snapshot = sim.state.clone()
    full = ms(lambda i: sim.step(bank[i % len(bank)]))
    sim.state.copy_(snapshot)
    with_obs = ms(lambda i: kernel.decision_step(sim._obs, sim._final_obs))
    sim.state.copy_(snapshot)
    kernel.writes_obs = False
    try:
        physics = ms(lambda i: kernel.decision_step(sim._obs, sim._final_obs))
    finally:
        kernel.writes_obs = True
    return {"step": full, "physics_and_closing": physics, "observations": with_obs - physics,
            "actions_resets_python": full - with_obs,
            "active_slot_fraction": float(sim.state.m_active.float().mean())}


def profile_torch(n: int, device: torch.device, mode: str, config: SimConfig, steps: int = 8,
                  rows: int = 20) -> dict[str, object]:
    """Where a torch-path decision step's time goes: ``steps`` decisions of ``n`` environments in
    ``mode`` (``eager``, ``compiled``, ``fused``) under ``torch.profiler``, after 100 into the
    steady state.
    Returns the kernels (on CUDA; operators on the CPU) by self time, ``rows`` of them, and per
    decision: the kernel launches and the device (CUDA) or CPU self time summed over them."""
    from torch.profiler import ProfilerActivity, profile

    sim = BatchedSim(n, config=config, device=device, seed=0, compile=mode in ("compiled", "fused"),
                     backend="triton" if mode == "fused" else "torch")
    sim.reset()
    bank = _action_bank(n, device)
    for i in range(100):  # missiles in flight, episodes ending
        sim.step(bank[i % len(bank)])
    _sync(device)
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as prof:
        for i in range(steps):
            sim.step(bank[i % len(bank)])
        _sync(device)
    events = prof.key_averages()
    if cuda:
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        self_us = [e.self_device_time_total for e in kernels]
        sort_by = "self_device_time_total"
    else:
        kernels = [e for e in events if e.key.startswith("aten::")]
        self_us = [e.self_cpu_time_total for e in kernels]
        sort_by = "self_cpu_time_total"
    return {
        "table": events.table(sort_by=sort_by, row_limit=rows),
        "launches_per_decision": sum(e.count for e in kernels) / steps,
        "self_ms_per_decision": sum(self_us) / steps / 1e3,
    }


def bench_reference_loop(min_time_s: float, config: SimConfig) -> dict[str, float]:
    """The scalar reference, one environment, in a plain Python loop."""
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

    from sim.reference.gym import make_reference_env

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
    parser.add_argument("--peer-work", action="store_true",
                        help="1 missile per fighter, 10 physics steps of 0.1 s per decision (the Warp kernel's work)")
    parser.add_argument("--threads", type=int, default=None,
                        help="intra-op threads for torch and the native kernel (default: torch's)")
    parser.add_argument("--profile", action="store_true",
                        help="also print where a decision step's time goes at the largest size: the "
                             "native kernel's phases (CPU), the torch path's kernels (CUDA)")
    parser.add_argument("--backend", choices=("all", "torch", "native", "triton"), default="all",
                        help="which rows to run (native: CPU only; triton: the fused kernel of "
                             "sim/fused.py with compiled observations, CUDA only)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.backend == "native" and device.type != "cpu":
        parser.error("--backend native runs on the CPU only")
    try:
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    if sizes is not None and (not sizes or min(sizes) < 1):
        parser.error(f"--sizes must be integers >= 1, got {args.sizes!r}")
    if sizes is None:
        if args.quick:
            sizes = [4096]
        elif device.type == "cuda":
            sizes = [1, 256, 4096, 65536, 1 << 20, 1 << 22]
        else:
            sizes = [1, 256, 4096, 65536]
    min_time = 1.0 if args.quick else 3.0
    work = "peer" if args.peer_work else "default"
    config = PEER_WORK if args.peer_work else SimConfig()
    threads = torch.get_num_threads()

    print(f"device={device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else platform.processor() or platform.machine()}), "
          f"torch {torch.__version__}, threads={threads}, work={work} "
          f"({config.missiles_per_fighter} missile(s) per fighter, {config.physics_steps_per_decision} "
          f"physics steps of {config.dt_s} s per decision, {BatchedSim(1, config, backend='torch').obs_dim} "
          "observation floats per side)")
    ref = bench_reference_loop(min_time, config)
    print(f"reference loop (1 process)      : {ref['physics_env_steps_per_s']:>14,.0f} physics env-steps/s  {ref['agent_steps_per_s']:>12,.0f} agent-steps/s")
    vec = bench_async_vector_env(min_time)
    print(f"AsyncVectorEnv (2 processes)    : {vec['physics_env_steps_per_s']:>14,.0f} physics env-steps/s  {vec['agent_steps_per_s']:>12,.0f} agent-steps/s  (default model)")
    print()
    modes: list[str] = []
    if args.backend in ("all", "torch"):
        modes += ["eager"] if args.no_compile else ["eager", "compiled"]
    if args.backend in ("all", "native") and device.type == "cpu":
        modes.append("native")
    if args.backend == "triton" or (args.backend == "all" and device.type == "cuda"):
        reason = fused_unsupported(config, device)
        if reason is None:
            modes.append("fused")
        elif args.backend == "triton":
            parser.error(f"--backend triton: {reason}")
    print(f"{'N':>9} {'mode':>9} {'physics env-steps/s':>20} {'agent-steps/s':>15} {'x reference':>12} {'x async2':>9} {'1st call s':>10}")
    results: dict[tuple[int, str], dict[str, float]] = {}
    for n in sizes:
        for mode in modes:
            r = bench_batched(n, device, mode, min_time, config)
            results[(n, mode)] = r
            print(f"{n:>9} {mode:>9} {r['physics_env_steps_per_s']:>20,.0f} {r['agent_steps_per_s']:>15,.0f} "
                  f"{r['physics_env_steps_per_s'] / ref['physics_env_steps_per_s']:>12,.1f} "
                  f"{r['physics_env_steps_per_s'] / vec['physics_env_steps_per_s']:>9,.1f} {r['first_call_s']:>10.1f}")
        rate = {m: results[(n, m)]["physics_env_steps_per_s"] for m in modes}
        if "compiled" in rate:
            print(f"{n:>9} compiled/eager = {rate['compiled'] / rate['eager']:.2f}x")
        if "native" in rate and len(rate) > 1:
            best_torch = max(v for m, v in rate.items() if m != "native")
            print(f"{n:>9} native/best torch = {rate['native'] / best_torch:.2f}x")
        if "fused" in rate and "compiled" in rate:
            print(f"{n:>9} fused/compiled = {rate['fused'] / rate['compiled']:.2f}x")

    top = max(sizes)
    if args.profile and device.type == "cpu":
        prof = profile_native(top, config)
        print(f"\nnative decision step at N={top}, {threads} thread(s), ms per decision (steady state, "
              f"{prof['active_slot_fraction']:.0%} of missile slots in flight):")
        for key in ("step", "physics_and_closing", "observations", "actions_resets_python"):
            print(f"  {key:<24} {prof[key]:8.2f} ms  ({prof[key] / prof['step']:.0%})")
    for mode in [m for m in ("compiled", "fused") if m in modes] or ["eager"]:
        if not (args.profile and device.type == "cuda"):
            break
        kernels = profile_torch(top, device, mode, config)
        print(f"\n{mode} decision step at N={top}, kernels by device time (8 decisions, steady state): "
              f"{kernels['launches_per_decision']:.0f} kernel launches and "
              f"{kernels['self_ms_per_decision']:.2f} ms of kernel time per decision")
        print(kernels["table"])
    best_mode = max(modes, key=lambda m: results[(top, m)]["physics_env_steps_per_s"])
    best = results[(top, best_mode)]["physics_env_steps_per_s"]
    fields = {
        "device": device.type,
        "work": work,
        "threads": threads,
        "n": top,
        "mode": best_mode,
        "physics_env_steps_per_s": f"{best:.4g}",
        "agent_steps_per_s": f"{results[(top, best_mode)]['agent_steps_per_s']:.4g}",
        "x_reference": f"{best / ref['physics_env_steps_per_s']:.1f}",
        "x_async2": f"{best / vec['physics_env_steps_per_s']:.1f}",
    }
    if "compiled" in modes:
        fields["compiled_over_eager"] = f"{results[(top, 'compiled')]['physics_env_steps_per_s'] / results[(top, 'eager')]['physics_env_steps_per_s']:.2f}"
    if "fused" in modes and "compiled" in modes:
        fields["fused_over_compiled"] = f"{results[(top, 'fused')]['physics_env_steps_per_s'] / results[(top, 'compiled')]['physics_env_steps_per_s']:.2f}"
    if "native" in modes and len(modes) > 1:
        best_torch = max(results[(top, m)]["physics_env_steps_per_s"] for m in modes if m != "native")
        fields["native_over_torch"] = f"{results[(top, 'native')]['physics_env_steps_per_s'] / best_torch:.2f}"
    print("RESULT " + " ".join(f"{k}={v}" for k, v in fields.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
