"""The reach estimate (sim/reach/spacetime.py, sim/reach/tables.py) against the simulated missile, one run.

Ground truth (sim/reach/truth.py): for every geometry, shots at a grid of ranges are fired in one
batched sim (the sim's own launch, guidance, integration, hit test and loss rules, one physics
step per decision), shooter and target flying straight (throttle trimmed to hold speed), or the
target turning away at full rudder and full throttle, and the largest range that hits is
searched to 29 m. The estimate is the table lookup the scripted opponents and the observation
use. Printed per geometry: both ranges and their ratio; then the worst error per manoeuvre,
what the lookup costs per environment, and what the observation's ``reach`` block
(``SimConfig.obs_reach``) adds to a decision step of the batched sim.

Usage: ``python bench/reach.py [--quick] [--threads 1]`` (quick: speeds 250/350/450 only). The
last line is ``RESULT max_rel_error=... ...``.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim import BatchedSim, SimConfig
from sim.reach.missile import missile_tables
from sim.reach.spacetime import reach_features, reach_straight, reach_turning_away
from sim.reach.tables import clear_reach_tables
from sim.reach.truth import measure_reach

GEOMETRIES = (
    # name, aspect of the target's heading to the line of sight (deg; 180 = at the shooter), escape
    ("head-on", 180.0, False),
    ("oblique-in", 135.0, False),
    ("beam", 90.0, False),
    ("oblique-out", 45.0, False),
    ("tail", 0.0, False),
    ("turn-away from head-on", 180.0, True),
    ("turn-away from beam", 90.0, True),
    ("turn-away from oblique-out", 45.0, True),
)


def step_cost_ms(config: SimConfig, n: int, steps: int) -> float:
    """Mean wall time (ms) of one decision step of ``n`` environments, random actions."""
    sim = BatchedSim(n, config, seed=0)
    sim.reset()
    gen = torch.Generator().manual_seed(0)
    bank = [torch.stack([torch.randint(0, 3, (n, 2), generator=gen), torch.randint(0, 3, (n, 2), generator=gen),
                         (torch.rand(n, 2, generator=gen) < 0.05).long()], -1) for _ in range(8)]
    for a in bank[:2]:
        sim.step(a)
    best = math.inf
    for _ in range(3):  # best of three slices: the machine is shared
        start = time.perf_counter()
        for i in range(steps):
            sim.step(bank[i % len(bank)])
        best = min(best, (time.perf_counter() - start) / steps * 1e3)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="speeds 250/350/450 only")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a shared 2-core machine, intra-op "
                             "threads mostly wait on each other)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = SimConfig()
    speeds = [250.0, 350.0, 450.0] if args.quick else [250.0, 300.0, 350.0, 400.0, 450.0]
    rows = [(vs, vt, g) for vs in speeds for vt in speeds for g in GEOMETRIES]
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{len(rows)} geometries, truth to {120_000 / 16 ** 3:.0f} m")

    start = time.perf_counter()
    clear_reach_tables()
    tables = missile_tables(config)
    build_s = time.perf_counter() - start
    vs = torch.tensor([r[0] for r in rows], dtype=torch.float64)
    vt = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    aspect = torch.deg2rad(torch.tensor([r[2][1] for r in rows], dtype=torch.float64))
    escape = torch.tensor([r[2][2] for r in rows])
    start = time.perf_counter()
    truth = measure_reach(config, vs, vt, aspect, escape)
    truth_s = time.perf_counter() - start
    model = torch.where(
        escape,
        reach_turning_away(tables, vs, vt, aspect.cos(), aspect.sin()),
        reach_straight(tables, vs, vt, aspect.cos(), aspect.sin()),
    )
    ratio = model / truth
    print(f"{'shooter':>7} {'target':>6}  {'geometry':<27} {'sim km':>7} {'estimate km':>11} {'ratio':>6}")
    for (a, b, g), t, m, q in zip(rows, truth.tolist(), model.tolist(), ratio.tolist(), strict=True):
        print(f"{a:>7.0f} {b:>6.0f}  {g[0]:<27} {t / 1e3:>7.2f} {m / 1e3:>11.2f} {q:>6.3f}")
    err = (ratio - 1).abs()
    print()
    for name, _, _ in GEOMETRIES:
        sel = torch.tensor([r[2][0] == name for r in rows])
        print(f"{name:<27} max |ratio - 1| = {float(err[sel].max()):.4f}  "
              f"mean ratio = {float(ratio[sel].mean()):.4f}")

    # What a lookup costs: all reach features (4 reaches + the escape margin) per observation.
    n = 4096
    sim = BatchedSim(n, config, seed=1)
    obs = sim.reset()[:, 0].clone()
    f32 = tables.to("cpu", torch.float32)
    reach_features(obs, sim.layout, f32)
    start = time.perf_counter()
    reps = 5
    for _ in range(reps):
        reach_features(obs, sim.layout, f32)
    features_us = (time.perf_counter() - start) / reps / n * 1e6
    start = time.perf_counter()
    for _ in range(reps):
        reach_straight(f32, obs[:, 4] * 500, obs[:, 16] * 500, obs[:, 14], obs[:, 15])
    lookup_us = (time.perf_counter() - start) / reps / n * 1e6
    base_ms = step_cost_ms(config, n, 10)
    reach_ms = step_cost_ms(config.replace(obs_reach=True), n, 10)
    print(f"\ntables measured in {build_s:.1f} s; truth search {truth_s:.1f} s")
    print(f"one reach lookup: {lookup_us:.3f} us/env; all reach features incl. escape margin: "
          f"{features_us:.2f} us/env ({n} envs, {torch.get_num_threads()} threads)")
    print(f"decision step, {n} envs: {base_ms:.1f} ms without the reach block, {reach_ms:.1f} ms with it")
    print("RESULT " + " ".join(f"{k}={v}" for k, v in {
        "max_rel_error": f"{float(err.max()):.4f}",
        "mean_rel_error": f"{float(err.mean()):.4f}",
        "geometries": len(rows),
        "tables_build_s": f"{build_s:.1f}",
        "lookup_us_per_env": f"{lookup_us:.3f}",
        "step_ms_obs_reach_off": f"{base_ms:.1f}",
        "step_ms_obs_reach_on": f"{reach_ms:.1f}",
    }.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
