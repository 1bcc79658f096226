"""Scaling over ``torchrun`` ranks: the same total work with 1 rank and with 2 ranks, one core each.

Each run is the real ``python -m torch.distributed.run --standalone --nproc-per-node R`` starting
this script once per rank, and each rank runs ``pipeline.launch``'s :func:`~pipeline.launch.run`
on CPU (gloo) with one actor, in a process of its own as the launcher's CPU default has it
(``--actor-processes off``: a thread beside the learner, the rank one process). Every
rank runs torch with one intra-op thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``)
and each rank is pinned to a core of its own (``os.sched_setaffinity``, core LOCAL_RANK), its
actor process with it: the 1-rank run uses one core, the 2-rank run two. A rank's actor process
runs below its learner, in Linux's idle scheduling class (``actors.sched idle``, a CPU job's
default for several ranks, and set for both sizes here so they run the same config), so the
learner's update and its all-reduce take the core the moment they can. ``--pin job`` confines a job of R
ranks to cores 0..R-1 instead, shared between its ranks (bench/RESULTS.md has both). The job's figures:

- agent-steps/s: the samples every rank trained on, summed, over the slowest rank's wall time
  (first chunk to last update);
- learner samples/s: each rank's samples over its own update time, summed over the ranks;
- the all-reduce: the learner's gradient all-reduce timed inside the run
  (:data:`learner.distributed.GRADIENT_ALL_REDUCE`), per call in ms and as a share of the
  rank's update time (the mean over the ranks), and once more bare, by a 2-rank job of its own
  that sums a buffer of the gradient's size 300 times with a barrier before each (the median
  ms: the collective without waiting for a late peer).

``ratio`` is the scaling efficiency, 2-rank agent-steps/s over twice the 1-rank figure (1.0:
two cores do twice one core's work; the target is 0.9). Two cores busy at once do not always
do twice one core's work on a shared host, with or without communication, so a third job
measures that ceiling: **a pair** of independent 1-rank jobs run side by side, one on each
core, sharing nothing (``pair`` agent-steps/s: both jobs' samples over the later one's wall
time). ``ratio_to_pair``, the 2-rank job over the pair, is then what the ranks' collectives and
lockstep cost, apart from what the host's two busy cores cost. The three jobs run in a rotating
order, ``--repeats`` times each, and the medians are reported.

    python bench/scale.py            # 2 x 327,680 agent-steps per size
    python bench/scale.py --quick    # 16,384 agent-steps per run, once per size
    python bench/scale.py --opponent league   # the league's exchange at every update too
    python bench/scale.py --gradient-sync off # a ceiling: ranks skip the gradient all-reduce

``--gradient-sync off`` is a measurement, not a way to train: every rank of the 2-rank job
skips the learner's gradient all-reduce (:meth:`learner.distributed.GradientAllReducer.all_reduce`
made a no-op in the rank's process; the update's other collectives stay), so the ranks' weights
drift apart, and the job shows what two ranks would do if the gradients' communication were
free: the most that any cheaper gradient exchange could win back.

The last line is ``RESULT key=value ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.workers import cpu_name

REPO = Path(__file__).resolve().parents[1]

RANK_FLAGS = ["--device", "cpu", "--actors", "1", "--display", "none",
              "--metrics-port", "-1", "--set", "run.eval_episodes=0"]
"""Every rank's launcher flags: one actor, no evaluation (the opponent is ``--opponent``, the
actor a process or a thread by ``--actor-processes``)."""


@dataclass
class RankFigures:
    """What one rank measured, written to ``rank<R>.json`` in the run's output folder."""

    rank: int
    trained_samples: int
    wall_s: float
    learner_busy_s: float
    updates: int
    all_reduce_calls: int
    all_reduce_s: float
    all_reduce_elements: int


@dataclass
class JobFigures:
    """One job's figures (see the module docstring)."""

    ranks: int
    agent_steps_per_s: float
    learner_samples_per_s: float
    all_reduce_ms: float
    all_reduce_share: float
    all_reduce_elements: int


def _pin_choice(value: str) -> str:
    """``--pin``'s value: ``job``, ``rank``, or ``core:K`` (used by :func:`measure_pair`)."""
    if value in ("job", "rank") or (value.startswith("core:") and value.removeprefix("core:").isdigit()):
        return value
    raise argparse.ArgumentTypeError(f"{value!r} is not one of job, rank")


def _pin(pin: str) -> int:
    """Confine this rank to its job's cores (``job``: cores 0..R-1), to its own (``rank``), or
    to core K (``core:K``: one job of a side-by-side pair)."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cores = os.cpu_count() or 1
    if pin.startswith("core:"):
        os.sched_setaffinity(0, {int(pin.removeprefix("core:")) % cores})
    elif pin == "rank":
        os.sched_setaffinity(0, {local_rank % cores})
    else:
        os.sched_setaffinity(0, set(range(min(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), cores))))
    return local_rank


def rank_main(out_dir: Path, flags: list[str], pin: str, gradient_sync: bool = True) -> None:
    """One rank of a job: confine it to its cores, run the launcher, write this rank's figures
    (``gradient_sync`` False: the gradient all-reduce skipped, see the module docstring)."""
    local_rank = _pin(pin)
    import torch

    torch.set_num_threads(1)
    from learner.distributed import GRADIENT_ALL_REDUCE, GradientAllReducer
    if not gradient_sync:
        GradientAllReducer.all_reduce = lambda self: None  # type: ignore[method-assign]
    from pipeline.config import resolve
    from pipeline.config.flags import parse_config
    from pipeline.launch import run

    result = run(resolve(parse_config(flags)))
    if result.exit_code != 0:
        raise SystemExit(f"rank {local_rank}: the run failed with exit code {result.exit_code}")
    figures = RankFigures(int(os.environ.get("RANK", "0")), result.ring.consumed_samples, result.wall_s,
                          result.learner_busy_s, result.updates, GRADIENT_ALL_REDUCE.calls,
                          GRADIENT_ALL_REDUCE.seconds, GRADIENT_ALL_REDUCE.elements)
    (out_dir / f"rank{figures.rank}.json").write_text(json.dumps(asdict(figures)))


def _job_flags(total_steps: int, envs: int, opponent: str, run_dir: Path, processes: str, sched: str,
               compiled: bool) -> list[str]:
    # The compiled actor step is chosen by a job's total (1M agent-steps or more), so every job
    # here sets it: a pair's half-size jobs and a 2-rank job would otherwise run different code.
    on = str(compiled).lower()
    return [*RANK_FLAGS, "--set", f"run.compile_step={on}", "--set", f"run.compile_agents={on}",
            "--set", f"actors.processes={processes}", "--set", f"actors.sched={sched}",
            "--opponent", opponent, "--envs-per-actor", str(envs), "--total-steps", str(total_steps),
            "--run-dir", str(run_dir)]


def measure(ranks: int, total_steps: int, envs: int, opponent: str, work_dir: Path, pin: str,
            processes: str, sched: str = "idle", compiled: bool = False,
            gradient_sync: bool = True) -> JobFigures:
    """One job of ``ranks`` ranks through ``torch.distributed.run``, ``total_steps`` agent-steps."""
    work_dir.mkdir(parents=True)
    flags = _job_flags(total_steps, envs, opponent, work_dir / "run", processes, sched, compiled)
    _torchrun(ranks, ["--pin", pin, "--gradient-sync", "on" if gradient_sync else "off",
                      "--rank-out", str(work_dir), "--", *flags])
    return _figures(ranks, [work_dir / f"rank{r}.json" for r in range(ranks)], total_steps)


def measure_pair(total_steps: int, envs: int, opponent: str, work_dir: Path, processes: str,
                 sched: str = "idle", compiled: bool = False) -> JobFigures:
    """Two independent 1-rank jobs at once, one on each core, each ``total_steps / 2``
    agent-steps: two cores' work with no communication between them (the 2-rank job's ceiling
    on this host). Figures as one job's, from both."""
    jobs = []
    for core in range(2):
        part = work_dir / f"core{core}"
        part.mkdir(parents=True)
        flags = _job_flags(total_steps // 2, envs, opponent, part / "run", processes, sched, compiled)
        jobs.append(_torchrun_start(1, ["--pin", f"core:{core}", "--rank-out", str(part), "--", *flags]))
    for job in jobs:
        _torchrun_wait(1, job)
    return _figures(2, [work_dir / f"core{core}" / "rank0.json" for core in range(2)], total_steps)


def _figures(ranks: int, files: list[Path], total_steps: int) -> JobFigures:
    """A job's figures from its ranks' files (see the module docstring)."""
    shares = [RankFigures(**json.loads(f.read_text())) for f in files]
    trained = sum(s.trained_samples for s in shares)
    if trained < total_steps:
        raise SystemExit(f"{ranks}-rank job trained {trained} agent-steps of {total_steps}")
    return JobFigures(
        ranks, trained / max(s.wall_s for s in shares),
        sum(s.trained_samples / max(s.learner_busy_s, 1e-9) for s in shares),
        statistics.mean(1000.0 * s.all_reduce_s / max(s.all_reduce_calls, 1) for s in shares),
        statistics.mean(s.all_reduce_s / max(s.learner_busy_s, 1e-9) for s in shares),
        shares[0].all_reduce_elements)


def probe_main(out_dir: Path, elements: int, calls: int, pin: str) -> None:
    """One rank of the bare all-reduce: ``calls`` sums of ``elements`` float32 in step (a barrier
    before each, so no rank waits for a late peer); writes this rank's median ms."""
    _pin(pin)
    import time

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    flat = torch.zeros(elements)
    times = []
    for i in range(calls + calls // 10):
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(flat)
        if i >= calls // 10:  # the first tenth warms up
            times.append(time.perf_counter() - start)
    dist.destroy_process_group()
    (out_dir / f"probe{os.environ.get('RANK', '0')}.json").write_text(json.dumps(1000.0 * statistics.median(times)))


def measure_bare(elements: int, work_dir: Path, pin: str, calls: int = 300) -> float:
    """The median ms of a bare gloo all-reduce of ``elements`` float32 between 2 ranks."""
    work_dir.mkdir(parents=True)
    _torchrun(2, ["--pin", pin, "--probe-out", str(work_dir), "--probe-elements", str(elements),
                  "--probe-calls", str(calls)])
    return max(json.loads((work_dir / f"probe{r}.json").read_text()) for r in range(2))


def _torchrun_start(ranks: int, script_args: list[str]) -> subprocess.Popen[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             "--nproc-per-node", str(ranks), str(Path(__file__).resolve()), *script_args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _torchrun_wait(ranks: int, job: subprocess.Popen[str]) -> None:
    stdout, stderr = job.communicate()
    if job.returncode != 0:
        raise SystemExit(f"{ranks}-rank job failed (exit {job.returncode}):\n{stdout[-3000:]}{stderr[-3000:]}")


def _torchrun(ranks: int, script_args: list[str]) -> None:
    _torchrun_wait(ranks, _torchrun_start(ranks, script_args))


def main(argv: list[str] | None = None) -> None:
    """Parse the command line; as a rank, run it; otherwise run both sizes and print the RESULT."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one short run per size (about a minute)")
    p.add_argument("--total-steps", type=int, default=None, help="agent-steps per job")
    p.add_argument("--envs-per-actor", type=int, default=64)
    p.add_argument("--opponent", default="crank",
                   help="crank (fixed), or league: its games cross the ranks at every update")
    p.add_argument("--repeats", type=int, default=None, help="jobs per size (median reported)")
    p.add_argument("--actor-processes", choices=("on", "off"), default="on",
                   help="on: each rank's actor in a process of its own (the launcher's CPU default); "
                        "off: an actor thread beside the learner's")
    p.add_argument("--actor-sched", choices=("idle", "normal"), default="idle",
                   help="the actor processes' scheduling class, both sizes (idle: a CPU job's default; "
                        "normal: below the learner by nice 19 in the 2-rank job only)")
    p.add_argument("--compile", choices=("off", "on"), default="off",
                   help="the compiled actor step and opponents (run.compile_step, run.compile_agents) in "
                        "every job (a launcher run turns them on from 1M agent-steps)")
    p.add_argument("--pin", type=_pin_choice, default="rank",
                   help="rank: each rank on a core of its own (the default); job: a job of R ranks shares cores 0..R-1")
    p.add_argument("--gradient-sync", choices=("on", "off"), default="on",
                   help="off: the 2-rank job's ranks skip the gradient all-reduce (a ceiling, not training: "
                        "their weights drift apart)")
    p.add_argument("--rank-out", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--probe-out", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--probe-elements", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--probe-calls", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("rank_flags", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rank_out is not None:
        rank_main(args.rank_out, args.rank_flags, args.pin, args.gradient_sync == "on")
        return
    if args.probe_out is not None:
        probe_main(args.probe_out, args.probe_elements, args.probe_calls, args.pin)
        return
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("error: bench/scale.py needs 2 cores (one per rank)")
    total = args.total_steps or (16_384 if args.quick else 327_680)
    repeats = args.repeats or (1 if args.quick else 2)
    runs: dict[int | str, list[JobFigures]] = {1: [], "pair": [], 2: []}
    order: list[int | str] = [1, "pair", 2]
    bare_ms: float | None = None
    sync = args.gradient_sync == "on"
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeats):
            for kind in order[r % 3:] + order[:r % 3]:  # rotate: no job always runs warmer
                work = Path(tmp) / f"{kind}_{r}"
                if kind == "pair":
                    m = measure_pair(total, args.envs_per_actor, args.opponent, work, args.actor_processes,
                                     args.actor_sched, args.compile == "on")
                else:
                    m = measure(int(kind), total, args.envs_per_actor, args.opponent, work, args.pin,
                                args.actor_processes, args.actor_sched, args.compile == "on", sync)
                runs[kind].append(m)
                if kind == 2 and bare_ms is None and sync:
                    bare_ms = measure_bare(m.all_reduce_elements, Path(tmp) / "bare", args.pin)
                label = "2 x 1 rank side by side" if kind == "pair" else f"{kind} rank(s)"
                print(f"{label} run {r}: {m.agent_steps_per_s:,.0f} agent-steps/s, learner "
                      f"{m.learner_samples_per_s:,.0f} samples/s of update time"
                      + (f", gradient all-reduce {m.all_reduce_ms:.2f} ms = {m.all_reduce_share:.1%} of "
                         "update time" if kind == 2 else "") + f" (load {_load()})", flush=True)
    med = {k: statistics.median(x.agent_steps_per_s for x in v) for k, v in runs.items()}
    learner = {k: statistics.median(x.learner_samples_per_s for x in v) for k, v in runs.items()}
    ms = statistics.median(x.all_reduce_ms for x in runs[2])
    share = statistics.median(x.all_reduce_share for x in runs[2])
    ratio = med[2] / (2 * med[1])
    pair_of_one = med["pair"] / (2 * med[1])
    to_pair = med[2] / med["pair"]
    print(f"device cpu ({cpu_name()}), one torch thread per rank, pinned by {args.pin}, actor processes "
          f"{args.actor_processes} ({args.actor_sched} class), actor step compiled {args.compile}, gradient "
          f"all-reduce {args.gradient_sync}, 1 actor x {args.envs_per_actor} envs, "
          f"{total:,} agent-steps per job, median of {repeats}")
    if sync:
        assert bare_ms is not None
        print(f"gradient all-reduce: {runs[2][0].all_reduce_elements:,} float32, {ms:.2f} ms per call in the run "
              f"(waiting for the other rank included), {share:.1%} of update time; bare (ranks in step) "
              f"{bare_ms:.3f} ms")
    else:
        print("gradient all-reduce: skipped by every rank (--gradient-sync off: the ranks' weights drifted apart)")
    print(f"ratio (2-rank agent-steps/s over twice the 1-rank figure) {ratio:.3f}; target 0.9")
    print(f"two independent 1-rank jobs side by side do {pair_of_one:.3f} of twice one job alone (the host's "
          f"two busy cores); the 2-rank job does {to_pair:.3f} of the pair (its collectives and lockstep)")
    import torch

    print(f"RESULT device=cpu cores=2 torch={torch.__version__} opponent={args.opponent} actor_processes={args.actor_processes} actor_sched={args.actor_sched} compile={args.compile} gradient_sync={args.gradient_sync} pin={args.pin} total_steps={total} repeats={repeats} "
          f"ranks1_agent_steps_per_s={med[1]:.0f} ranks2_agent_steps_per_s={med[2]:.0f} ratio={ratio:.3f} "
          f"pair_agent_steps_per_s={med['pair']:.0f} pair_ratio={pair_of_one:.3f} ratio_to_pair={to_pair:.3f} "
          f"ranks1_learner_samples_per_s={learner[1]:.0f} ranks2_learner_samples_per_s={learner[2]:.0f} "
          f"allreduce_ms={ms:.3f} allreduce_share={share:.4f} "
          f"allreduce_bare_ms={float('nan') if bare_ms is None else bare_ms:.3f} "
          f"gradient_floats={runs[2][0].all_reduce_elements} load={_load().replace(' ', ',')}")


def _load() -> str:
    """The 1-, 5- and 15-minute load averages (the machine may be shared)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
