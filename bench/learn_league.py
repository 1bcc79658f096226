"""A fighter from scratch through the self-play league, then judged the way a user would.

Trains ``python -m pipeline.launch --opponent league`` in ``--segments`` parts (each resumes the
last, so the league, the learning-rate schedule and the step budget carry on), evaluates after
each part against the scripted ladder (a learning-curve row: agent-steps, wall time, win rate
per opponent, the learner's league rating), then:

- the final policy against every scripted opponent, ``--episodes`` per opponent from random
  starts, each start played from both sides (``pipeline.evaluate``), with Wilson intervals;
- a round robin of the scripted agents, the pool's snapshots and the final policy, with
  Bradley–Terry ratings: ``top_rated`` says who came first.

Targets: ≥ 95 % wins against ``crank`` and ``random``, ≥ 99 % against straight, pursuit and
shooter, the final policy top rated, in at most 30 minutes on a 2-core CPU.

    python bench/learn_league.py                 # the full bench
    python bench/learn_league.py --quick         # a minute or two: the mechanics, not the targets
    python bench/learn_league.py --set league.self_play=0.25 --set actors.reward=outcome
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learner.checkpoint import list_checkpoints
from pipeline import evaluate as evaluate_cli
from pipeline.evaluate import MatchStats, bradley_terry
from pipeline.launch import main as launch

LADDER = ("straight", "pursuit", "shooter")
OPPONENTS = ("crank", "random", *LADDER)


def learner_rating(run_dir: Path) -> float | None:
    """The learner's Bradley–Terry rating from the league's recent counts (as the display)."""
    state = run_dir / "league" / "league.json"
    if not state.is_file():
        return None
    records = json.loads(state.read_text())["records"]
    matches = [MatchStats("learner", n, episodes=sum(r["recent"]), wins=r["recent"][0],  # type: ignore[arg-type]
                          draws=r["recent"][1], losses=r["recent"][2])
               for n, r in records.items() if sum(r["recent"]) > 0]
    if not matches:
        return None
    fit = bradley_terry(["learner", *(m.opponent for m in matches)], matches, iterations=2000, tol=1e-8)
    return fit["learner"]["elo"]


def evaluate(agent: str, opponents: tuple[str, ...], episodes: int, seed: int) -> dict[str, dict]:
    """Win/draw/loss summaries of ``agent`` against each opponent (quietly)."""
    with redirect_stdout(io.StringIO()):
        payload = evaluate_cli.main(["--agent", agent, "--opponents", ",".join(opponents),
                                     "--episodes", str(episodes), "--seed", str(seed),
                                     "--batch", str(min(episodes, 1024))])
    return {m["opponent"]: m for m in payload["matches"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=8_000_000, help="agent-steps to train in all")
    p.add_argument("--segments", type=int, default=8, help="training parts (one curve row each)")
    p.add_argument("--episodes", type=int, default=1000, help="final evaluation: episodes per opponent")
    p.add_argument("--curve-episodes", type=int, default=100, help="curve rows: episodes per opponent")
    p.add_argument("--rr-episodes", type=int, default=100, help="round robin: episodes per pair")
    p.add_argument("--rr-snapshots", type=int, default=8, help="round robin: the newest snapshots entered")
    p.add_argument("--run-dir", help="keep the run here (default: a temporary folder)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a tiny budget: checks the mechanics only")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to pipeline.launch (e.g. league.self_play=0.25)")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.segments = 40_960, 2
        args.episodes, args.curve_episodes, args.rr_episodes, args.rr_snapshots = 40, 16, 8, 2
    tmp = None
    if args.run_dir:
        run_dir = Path(args.run_dir)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="learn_league_")
        run_dir = Path(tmp.name) / "run"
    base = ["--opponent", "league", "--display", "none", "--metrics-port", "-1",
            "--seed", str(args.seed), "--set", "run.eval_episodes=0"]
    for kv in args.set:
        base += ["--set", kv]
    if args.quick:
        base += ["--actors", "2", "--envs-per-actor", "16", "--rollout-len", "8",
                 "--set", "league.snapshot_every=2", "--set", "league.hold_chunks=8"]
    print(f"device: {os.cpu_count()} CPUs seen, load average {os.getloadavg()[0]:.2f} at start; "
          f"{args.steps:,} agent-steps in {args.segments} parts; run {run_dir}", flush=True)
    rows = []
    train_s = 0.0
    start = time.perf_counter()
    for k in range(1, args.segments + 1):
        steps = math.ceil(args.steps * k / args.segments)
        argv_k = ["--resume", str(run_dir)] if k > 1 else ["--run-dir", str(run_dir)]
        t0 = time.perf_counter()
        with redirect_stdout(io.StringIO()):
            code = launch([*base, *argv_k, "--total-steps", str(steps)])
        train_s += time.perf_counter() - t0
        if code != 0:
            print(f"training part {k} failed with exit code {code}; see {run_dir / 'run.log'}")
            return code
        ckpt = str(run_dir / "checkpoints" / "latest.pt")
        curve = evaluate(ckpt, OPPONENTS, args.curve_episodes, seed=1000 + k)
        rating = learner_rating(run_dir)
        row = {"agent_steps": steps, "train_s": train_s, **{o: curve[o]["win_rate"] for o in OPPONENTS},
               "rating": rating}
        rows.append(row)
        print(f"  {steps:>10,} steps  {train_s:7.0f}s  " + "  ".join(f"{o} {row[o]:6.1%}" for o in OPPONENTS)
              + (f"  league rating {rating:.0f}" if rating is not None else ""), flush=True)
    final = str(run_dir / "checkpoints" / "latest.pt")
    t0 = time.perf_counter()
    results = evaluate(final, OPPONENTS, args.episodes, seed=args.seed + 7)
    eval_s = time.perf_counter() - t0
    print(f"\nfinal policy, {args.episodes} episodes per opponent from random starts, each start "
          "from both sides:")
    for o in OPPONENTS:
        m = results[o]
        lo, hi = m["win_ci95"]
        print(f"  {o:8s} win {m['win_rate']:6.1%} [{lo:.1%}, {hi:.1%}]  draw {m['draw_rate']:5.1%}  "
              f"loss {m['loss_rate']:5.1%}  ({m['episodes']} episodes, mean {m['mean_length_s']:.0f}s)")
    final_name = list_checkpoints(run_dir / "checkpoints")[-1].name  # the snapshot of the same version is the final
    snapshots = [str(q) for q in list_checkpoints(run_dir / "league") if q.name != final_name]
    entrants = [*OPPONENTS, *snapshots[-args.rr_snapshots:], final]
    t0 = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        rr = evaluate_cli.main(["--round-robin", ",".join(entrants), "--episodes", str(args.rr_episodes),
                                "--seed", str(args.seed + 11), "--batch", str(min(args.rr_episodes, 1024))])
    rr_s = time.perf_counter() - t0
    ratings = sorted(rr["ratings"].items(), key=lambda kv: -kv[1]["elo"])
    print(f"\nround robin of {len(entrants)} ({args.rr_episodes} episodes per pair):")
    for name, r in ratings:
        label = "final" if name == final else (Path(name).name if "/" in name else name)
        print(f"  {label:24s} {r['elo']:7.0f} ± {r['stderr']:.0f}")
    top = ratings[0][0]
    top_label = "final" if top == final else (Path(top).name if "/" in top else top)
    ladder_min = min(results[o]["win_rate"] for o in LADDER)
    print(f"\nwall time: training {train_s:.0f}s, final evaluation {eval_s:.0f}s, round robin {rr_s:.0f}s, "
          f"total {time.perf_counter() - start:.0f}s; load average {os.getloadavg()[0]:.2f} at the end")
    print(f"RESULT win_crank={results['crank']['win_rate']:.3f} win_random={results['random']['win_rate']:.3f} "
          f"win_ladder_min={ladder_min:.3f} top_rated={top_label} agent_steps={args.steps} "
          f"train_s={train_s:.0f} total_s={time.perf_counter() - start:.0f} quick={int(args.quick)}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
