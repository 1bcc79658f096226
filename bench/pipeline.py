"""End-to-end pipeline throughput: async (overlapping actors and learner) against sync.

Both modes run the real ``pipeline.launch`` with identical settings in this one process, in
alternating order, and the figure is agent-steps (decisions of the learning fighter) per second
of wall time from the first chunk to the last update, drain included. The sync mode is the
baseline; the ratio is async / sync. On a CPU, ``--actor-processes both`` runs both modes with
actor threads and with actor processes (``actors.processes``) and prints every ratio.

    python bench/pipeline.py --quick          # under a minute on a laptop CPU
    python bench/pipeline.py --quick --actor-processes both
    python bench/pipeline.py --device cuda    # GPU-sized defaults

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.cli import parse_config
from pipeline.config import pick_device, resolve
from pipeline.launch import run


def measure(argv: list[str], sync: bool, run_dir: Path) -> tuple[float, int, float]:
    """One run; returns (agent-steps/s, agent-steps, wall seconds)."""
    flags = [*argv, "--run-dir", str(run_dir)] + (["--sync"] if sync else [])
    config = resolve(parse_config(flags))
    result = run(config)
    if result.exit_code != 0:
        raise SystemExit(f"run in {run_dir} failed with exit code {result.exit_code}")
    s = result.ring
    assert s.produced_samples == s.consumed_samples + s.dropped_samples + s.in_flight_samples
    return result.agent_steps / result.wall_s, result.agent_steps, result.wall_s


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, run both modes, print the table and the RESULT line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one short run per mode (< 1 min on CPU)")
    p.add_argument("--device", default="auto")
    p.add_argument("--actors", type=int, default=4)
    p.add_argument("--envs-per-actor", type=int, default=None)
    p.add_argument("--rollout-len", type=int, default=None)
    p.add_argument("--total-steps", type=int, default=None, help="agent-steps per run")
    p.add_argument("--repeats", type=int, default=None, help="runs per mode (median reported)")
    p.add_argument("--opponent", default="crank")
    p.add_argument("--actor-processes", choices=("auto", "on", "off", "both"), default="auto",
                   help="actors in worker processes (both: compare threads and processes)")
    args = p.parse_args(argv)
    device = pick_device(args.device)
    cuda = device.startswith("cuda")
    envs = args.envs_per_actor or (8192 if cuda else 64)
    rollout = args.rollout_len or (32 if cuda else 16)
    chunk_round = args.actors * envs * rollout
    if args.total_steps:
        total = args.total_steps
    elif cuda:
        total = chunk_round * (20 if args.quick else 100)
    else:
        total = chunk_round * (8 if args.quick else 40)
    repeats = args.repeats or (1 if args.quick else 3)
    common = [
        "--device", device, "--actors", str(args.actors), "--envs-per-actor", str(envs),
        "--rollout-len", str(rollout), "--total-steps", str(total), "--opponent", args.opponent,
        "--display", "none", "--set", "run.eval_episodes=0",
    ]
    kinds = {"both": ["off", "on"]}.get(args.actor_processes, [args.actor_processes])
    modes = [f"{mode}/{kind}" for kind in kinds for mode in ("sync", "async")]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            # Alternate the order so no mode always runs on a warmer machine.
            for name in (modes if r % 2 == 0 else modes[::-1]):
                mode, kind = name.split("/")
                argv_k = [*common, "--actor-processes", kind]
                rate, steps, wall = measure(argv_k, mode == "sync", Path(tmp) / f"{mode}{kind}{r}")
                rates[name].append(rate)
                print(f"{_label(name):>15} run {r}: {steps:,} agent-steps in {wall:.2f}s = {rate:,.0f} "
                      f"agent-steps/s (load {_load()})", flush=True)
    med = {m: statistics.median(v) for m, v in rates.items()}
    print(f"device {device}, {args.actors} actors x {envs} envs x {rollout} steps, opponent "
          f"{args.opponent}, {total:,} agent-steps per run, median of {repeats}")
    for kind in kinds:
        sync_rate, async_rate = med[f"sync/{kind}"], med[f"async/{kind}"]
        print(f"{_label('sync/' + kind):>15} {sync_rate:,.0f} agent-steps/s (baseline)")
        print(f"{_label('async/' + kind):>15} {async_rate:,.0f} agent-steps/s  ratio async/sync "
              f"{async_rate / sync_rate:.2f}x")
    if len(kinds) == 2:
        print(f"processes/threads: async {med['async/on'] / med['async/off']:.2f}x, sync "
              f"{med['sync/on'] / med['sync/off']:.2f}x; async processes / sync threads "
              f"{med['async/on'] / med['sync/off']:.2f}x")
    figures = " ".join(f"{m.replace('/on', '_processes').replace('/off', '_threads').replace('/auto', '')}"
                       f"_agent_steps_per_s={v:.0f}" for m, v in med.items())
    kind = kinds[-1]
    print(
        f"RESULT device={device.split(':')[0]} actors={args.actors} envs_per_actor={envs} "
        f"rollout_len={rollout} total_steps={total} repeats={repeats} actor_processes={args.actor_processes} "
        f"{figures} ratio={med[f'async/{kind}'] / med[f'sync/{kind}']:.3f} load={_load().replace(' ', ',')}"
    )


def _label(mode: str) -> str:
    return mode.replace("/on", " processes").replace("/off", " threads").replace("/auto", "")


def _load() -> str:
    """The 1-, 5- and 15-minute load averages (the machine may be shared)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
