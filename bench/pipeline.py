"""End-to-end pipeline throughput: async (overlapping actors and learner) against sync.

Both modes run the real ``pipeline.launch`` with the launcher's defaults (the default run:
``python -m pipeline.launch --actors 4`` and ``... --sync``) in this one process, in
alternating order, and the figure is agent-steps (decisions of the learning fighter) per second
of wall time from the first chunk to the last update, drain included. The sync mode is the
baseline; the ratio is async / sync. ``actors.processes`` is left to ``auto`` (processes for
async on a CPU, threads for sync); ``--actor-processes both`` runs both modes with actor threads
and with actor processes and prints every ratio. Each run also gives the learner's own speed
(samples per second of update time) and the wall time to a rolling 80 % win rate against the
opponent (``--win-target``) from its ``progress.csv``. The opponent is ``crank`` unless
``--opponent`` says otherwise (the launcher's default is a league, whose rolling win rate is
against a changing mix; ``--opponent league`` times it).

    python bench/pipeline.py                  # the default run against crank, twice per mode
    python bench/pipeline.py --opponent league --total-steps 4000000
    python bench/pipeline.py --quick          # the default configuration, 8 chunk rounds
    python bench/pipeline.py --quick --actor-processes both
    python bench/pipeline.py --device cuda    # GPU-sized defaults

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.config import pick_device, resolve
from pipeline.config.flags import parse_config
from pipeline.launch import run


@dataclass
class Measured:
    """One run's figures."""

    rate: float
    """Agent-steps per second of wall time, first chunk to last update, drain included."""
    steps: int
    wall_s: float
    learner_samples_per_s: float
    """Samples trained per second of the learner's own update time."""
    time_to_win_s: float | None
    """Seconds from the start of the run to a rolling win rate of ``--win-target`` (None: not
    reached)."""


def measure(argv: list[str], sync: bool, run_dir: Path, win_target: float) -> Measured:
    """One run of ``pipeline.launch`` with ``argv``."""
    flags = [*argv, "--run-dir", str(run_dir)] + (["--sync"] if sync else [])
    config = resolve(parse_config(flags))
    result = run(config)
    if result.exit_code != 0:
        raise SystemExit(f"run in {run_dir} failed with exit code {result.exit_code}")
    s = result.ring
    assert s.produced_samples == s.consumed_samples + s.dropped_samples + s.in_flight_samples
    return Measured(result.agent_steps / result.wall_s, result.agent_steps, result.wall_s,
                    s.consumed_samples / max(result.learner_busy_s, 1e-9),
                    time_to_win(run_dir / "progress.csv", win_target))


def time_to_win(progress_csv: Path, target: float, min_episodes: int = 100) -> float | None:
    """The first ``wall_s`` in ``progress.csv`` where the rolling win rate (over at least
    ``min_episodes`` episodes) reached ``target``."""
    with progress_csv.open() as f:
        for row in csv.DictReader(f):
            if row["win_rate"] and float(row["win_rate"]) >= target and int(row["episodes"] or 0) >= min_episodes:
                return float(row["wall_s"])
    return None


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
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a launcher setting for every run (e.g. run.compile_step=false)")
    p.add_argument("--win-target", type=float, default=0.8,
                   help="report the wall time to this rolling win rate against the opponent")
    args = p.parse_args(argv)
    device = pick_device(args.device)
    # The launcher's own defaults unless told otherwise, so the figures are the default run's.
    shape = ["--device", device, "--actors", str(args.actors), "--opponent", args.opponent]
    if args.envs_per_actor:
        shape += ["--envs-per-actor", str(args.envs_per_actor)]
    if args.rollout_len:
        shape += ["--rollout-len", str(args.rollout_len)]
    default = resolve(parse_config(shape))
    envs, rollout = default.actors.envs_per_actor, default.actors.rollout_len
    chunk_round = args.actors * envs * rollout
    total = args.total_steps or (chunk_round * 8 if args.quick else default.run.total_steps)
    repeats = args.repeats or (1 if args.quick else 2)
    common = [*shape, "--total-steps", str(total), "--display", "none", "--metrics-port", "-1",
              "--set", "run.eval_episodes=0"] + [a for kv in args.overrides for a in ("--set", kv)]
    kinds = {"both": ["off", "on"]}.get(args.actor_processes, [args.actor_processes])
    modes = [f"{mode}/{kind}" for kind in kinds for mode in ("sync", "async")]
    runs: dict[str, list[Measured]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            # Alternate the order so no mode always runs on a warmer machine.
            for name in (modes if r % 2 == 0 else modes[::-1]):
                mode, kind = name.split("/")
                argv_k = [*common, "--actor-processes", kind]
                m = measure(argv_k, mode == "sync", Path(tmp) / f"{mode}{kind}{r}", args.win_target)
                runs[name].append(m)
                reached = f"{m.time_to_win_s:.0f}s" if m.time_to_win_s is not None else "not reached"
                print(f"{_label(name):>15} run {r}: {m.steps:,} agent-steps in {m.wall_s:.2f}s = {m.rate:,.0f} "
                      f"agent-steps/s; learner {m.learner_samples_per_s:,.0f} samples/s of update time; "
                      f"{args.win_target:.0%} vs {args.opponent}: {reached} (load {_load()})", flush=True)
    med = {m: statistics.median(x.rate for x in v) for m, v in runs.items()}
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
    async_runs = runs[f"async/{kind}"]
    learner = statistics.median(x.learner_samples_per_s for x in async_runs)
    reached = [x.time_to_win_s for x in async_runs if x.time_to_win_s is not None]
    to_win = f"{statistics.median(reached):.0f}" if len(reached) == len(async_runs) else "none"
    print(
        f"RESULT device={device.split(':')[0]} actors={args.actors} envs_per_actor={envs} "
        f"rollout_len={rollout} total_steps={total} repeats={repeats} actor_processes={args.actor_processes} "
        f"{figures} ratio={med[f'async/{kind}'] / med[f'sync/{kind}']:.3f} "
        f"learner_samples_per_s={learner:.0f} time_to_{round(args.win_target * 100)}_s={to_win} "
        f"load={_load().replace(' ', ',')}"
        + "".join(f" set:{kv}" for kv in args.overrides)
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
