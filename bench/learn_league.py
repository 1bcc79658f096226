"""A fighter from scratch through the self-play league, then judged the way a user would.

Trains ``python -m pipeline.launch --opponent league`` once for ``--steps`` agent-steps (one
learning-rate schedule), keeping a checkpoint every ``--checkpoint-s`` seconds; then:

- a learning curve: up to ``--curve-points`` of those checkpoints against the scripted ladder
  (agent-steps, wall time when it was written, win rate per opponent, the learner's league
  rating as the run reported it then), and the wall time of its first row at 95 % against
  ``crank`` and ``random`` (``time_to_95_s``; ``none`` when no row gets there);
- the final policy against every scripted opponent, ``--episodes`` per opponent from random
  starts, each start played from both sides (``pipeline.evaluate``), with Wilson intervals;
- the final policy against every held-out tactic (:data:`agents.tactics.HELDOUT`, never met
  in training), ``--heldout-episodes`` per tactic, with parameters drawn per episode from its
  held-out ranges: ``win_heldout_min`` is the lowest win rate;
- a round robin of the scripted agents, the pool's newest snapshots and the final policy, with
  Bradley–Terry ratings: ``top_rated`` says who came first;
- ``exploit_win``: the win rate against the frozen final policy of the strongest of three fresh
  learners trained against it for 4M agent-steps each, over 400 episodes (``bench/exploit.py``):
  how exploitable it is. Their runs are kept in ``RUN/exploiters/final/exploiterN``, so how they
  beat the policy can be watched (``pipeline.evaluate --record``).

With ``--exploiter-rounds K`` the training is cut into K + 1 equal stages of the one run
(``run.stop_steps``, then ``--resume``: one learning-rate schedule still); after each of the
first K stages a main exploiter, a fresh learner of the launcher's default recipe, trains for
``--exploiter-steps`` agent-steps against the policy as it stands (frozen), is played against
it over ``--exploiter-episodes`` episodes, and joins the league's anchors for the stages after
(``RUN/exploiters/roundN``), as AlphaStar's league grows main exploiters: whatever a best
response of the default budget finds against the policy, the policy then meets. Their training
counts in ``train_s``.

With ``--average-from F`` the mean of the run's checkpoints from the fraction F of its
agent-steps on (``python -m pipeline.average``, ``RUN/checkpoints/average.pt``) is judged
beside the final policy: the same evaluations, held-out tactics and exploiter seeds, its own
``RESULT_AVERAGE`` line, both entered in one round robin. With ``--select-from F`` the checkpoint
from the fraction F on with the highest worst win rate against the run's own anchors
(``python -m pipeline.select``, ``--select-episodes`` each, ``RUN/checkpoints/selected.pt``; never
a held-out tactic) is judged the same way, on a ``RESULT_SELECTED`` line. ``--judge-only`` judges a finished run
in ``--run-dir`` without training it (``--judge average``: the average alone; the final still
plays in the round robin).

Targets: ≥ 95 % wins against ``crank`` and ``random``, ≥ 99 % against straight, pursuit and
shooter, the final policy top rated, in at most 30 minutes on a 2-core CPU.

The run is the launcher's default league with one of ten recipes (``--recipe``;
bench/league_recipes.py says what each is and what it measured).

``--set`` overrides any of them (``--set ppo.teacher= --set ppo.teacher_coef=0`` trains a taught
recipe without its teacher; ``ppo.teacher_coef=0`` alone is refused, the teacher still named).

    python bench/learn_league.py                 # the full bench
    python bench/learn_league.py --quick         # a few minutes: the mechanics, not the targets
    python bench/learn_league.py --recipe sparring  # the best measured recipe
    python bench/learn_league.py --set league.self_play=0.25 --set actors.reward=outcome
    python bench/learn_league.py --recipe taught --seed 3 --run-dir RUN --judge-only --average-from 0.6667 --judge average
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exploit import DEFAULT_STEPS, exploit_match, match_line, strongest_exploiter
from league_recipes import RECIPES

from learner.checkpoint import list_checkpoints, read_checkpoint
from learner.checkpoint.average import average_checkpoints, checkpoints_since
from pipeline import evaluate as evaluate_cli
from pipeline import select as select_cli
from pipeline.config.files import load_toml, toml_value
from pipeline.evaluation.heldout import heldout_line, heldout_matches
from pipeline.launch import main as launch

LADDER = ("straight", "pursuit", "shooter")
OPPONENTS = ("crank", "random", *LADDER)


def reported_ratings(log: Path) -> list[tuple[int, float]]:
    """(agent-steps, the learner's league rating) of every progress line of ``run.log``."""
    out = []
    for line in log.read_text().splitlines():
        m = re.search(r"steps (\d+)/\d+ .*league: learner (\d+) Elo", line)
        if m:
            out.append((int(m[1]), float(m[2])))
    return out


def evaluate(agent: str, opponents: tuple[str, ...], episodes: int, seed: int) -> dict[str, dict]:
    """Win/draw/loss summaries of ``agent`` against each opponent (quietly)."""
    with redirect_stdout(io.StringIO()):
        payload = evaluate_cli.main(["--agent", agent, "--opponents", ",".join(opponents),
                                     "--episodes", str(episodes), "--seed", str(seed),
                                     "--batch", str(min(episodes, 1024))])
    return {m["opponent"]: m for m in payload["matches"]}


def rr_label(name: str, labels: dict[str, str]) -> str:
    """A round-robin entrant's name as printed: ``final``, ``average`` or ``selected`` for the policies judged,
    a checkpoint's file name, or the scripted agent's name."""
    return labels.get(name) or (Path(name).name if "/" in name else name)


def judge(policy: str, label: str, args: argparse.Namespace) -> dict[str, Any]:
    """``policy`` against every scripted opponent and every held-out tactic, printed as the
    bench prints them; its ``results`` (per opponent) and ``heldout_min``."""
    results = evaluate(policy, OPPONENTS, args.episodes, seed=args.seed + 7)
    print(f"\n{label} policy, {args.episodes} episodes per opponent from random starts, each start "
          "from both sides:")
    for o in OPPONENTS:
        m = results[o]
        lo, hi = m["win_ci95"]
        print(f"  {o:8s} win {m['win_rate']:6.1%} [{lo:.1%}, {hi:.1%}]  draw {m['draw_rate']:5.1%}  "
              f"loss {m['loss_rate']:5.1%}  ({m['episodes']} episodes, mean {m['mean_length_s']:.0f}s)")
    heldout_min, heldout_rates = heldout_line(heldout_matches(policy, args.heldout_episodes, seed=args.seed + 9))
    print(f"  {heldout_rates}", flush=True)
    return {"results": results, "heldout_min": heldout_min}


def train_in_stages(argv_launch: list[str], run_dir: Path, args: argparse.Namespace) -> int:
    """The league run, in ``args.exploiter_rounds + 1`` stages with a main exploiter trained
    after each stage but the last and added to the anchors; the launcher's exit code."""
    rounds = args.exploiter_rounds
    anchors: list[str] = []
    for stage in range(rounds + 1):
        stop = args.steps * (stage + 1) // (rounds + 1) if stage < rounds else 0
        argv = [*argv_launch, "--set", f"run.stop_steps={stop}"]
        if stage > 0:
            argv += ["--resume", str(run_dir), "--set", f"league.anchors={toml_value(anchors)}"]
        with redirect_stdout(io.StringIO()):
            code = launch(argv)
        if code != 0 or stage == rounds:
            return code
        if not anchors:
            anchors = list(load_toml(run_dir / "config.toml")["league"]["anchors"])
        target = run_dir / "checkpoints" / "latest.pt"
        steps = int(read_checkpoint(target)["extra"]["agent_steps"])
        where = run_dir / "exploiters" / f"round{stage}"
        match = exploit_match(str(target), args.exploiter_steps, args.exploiter_episodes,
                              seed=args.seed + 201 + stage, run_dir=where, quick=args.quick)
        print(f"main exploiter {stage} (the policy at {steps:,} agent-steps): "
              + match_line({**match, "seed": args.seed + 201 + stage}, "it").split(": ", 1)[1]
              + "; joins the anchors", flush=True)
        anchors.append(str(where / "checkpoints" / "latest.pt"))
    return 0


def train_and_curve(argv_launch: list[str], run_dir: Path,
                    args: argparse.Namespace) -> tuple[int, float, float | None]:
    """Train the run (:func:`train_in_stages`) and print its learning curve; the launcher's exit
    code, the training's wall time and the curve's time to 95 % against crank and random."""
    start, born = time.perf_counter(), time.time()  # born: the curve's clock (a resume rewrites config.toml)
    code = train_in_stages(argv_launch, run_dir, args)
    train_s = time.perf_counter() - start
    if code != 0:
        return code, train_s, None
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    picks = sorted({round(i * (len(checkpoints) - 1) / max(args.curve_points - 1, 1))
                    for i in range(args.curve_points)})
    elo = reported_ratings(run_dir / "run.log")
    time_to_95: float | None = None  # the first curve row at 95 % against crank and random
    print("learning curve (win rate per opponent, the learner's league rating as reported then):")
    for i in picks:
        ckpt = checkpoints[i]
        steps = int(read_checkpoint(ckpt)["extra"]["agent_steps"])
        curve = evaluate(str(ckpt), OPPONENTS, args.curve_episodes, seed=1000 + i)
        rating = next((r for s_, r in elo if s_ >= steps), elo[-1][1] if elo else None)
        if time_to_95 is None and min(curve[o]["win_rate"] for o in ("crank", "random")) >= 0.95:
            time_to_95 = ckpt.stat().st_mtime - born
        print(f"  {steps:>10,} steps  {ckpt.stat().st_mtime - born:7.0f}s  "
              + "  ".join(f"{o} {curve[o]['win_rate']:6.1%}" for o in OPPONENTS)
              + (f"  league rating {rating:.0f}" if rating is not None else ""), flush=True)
    print("  first row at 95 % against crank and random: "
          + (f"{time_to_95:.0f}s" if time_to_95 is not None else "none"), flush=True)
    return 0, train_s, time_to_95


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=24_000_000, help="agent-steps to train in all")
    p.add_argument("--checkpoint-s", type=float, default=60.0, help="seconds between checkpoints")
    p.add_argument("--curve-points", type=int, default=8, help="checkpoints on the learning curve")
    p.add_argument("--episodes", type=int, default=1000, help="final evaluation: episodes per opponent")
    p.add_argument("--curve-episodes", type=int, default=100, help="curve rows: episodes per opponent")
    p.add_argument("--heldout-episodes", type=int, default=400, help="held-out tactics: episodes per tactic")
    p.add_argument("--rr-episodes", type=int, default=100, help="round robin: episodes per pair")
    p.add_argument("--rr-snapshots", type=int, default=8, help="round robin: the newest snapshots entered")
    p.add_argument("--run-dir", help="keep the run here (default: a temporary folder)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="a tiny budget: checks the mechanics only")
    p.add_argument("--exploiter-rounds", type=int, default=0,
                   help="main exploiters trained during the run, each joining the anchors (default 0)")
    p.add_argument("--exploiter-steps", type=int, default=DEFAULT_STEPS, help="each main exploiter's agent-steps")
    p.add_argument("--exploiter-episodes", type=int, default=100,
                   help="episodes of each main exploiter against the policy it was trained against")
    p.add_argument("--recipe", choices=sorted(RECIPES), default="ace",
                   help="the settings the run starts from (default ace: the champion ace's; taught: "
                        "the teacher, draws priced and all training tactics; traced: taught with the "
                        "trace and a quarter past selves; anchored: the trace and no past selves; "
                        "horizon: anchored with flee, long shots priced, the reach block, the "
                        "teacher's flying and γ 0.999; pressed: horizon with the enemy pressed against the "
                        "edge priced; wandering: pressed with wander among the anchors; tutored: "
                        "wandering taught by ace3 for the whole run; sparring: tutored with a quarter "
                        "past selves; guarded: sparring with the teacher left out of the last 15 s "
                        "of a missile's flight; what each measured: bench/league_recipes.py)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to pipeline.launch after the recipe's (e.g. league.self_play=0.25)")
    p.add_argument("--average-from", type=float, default=None, metavar="F",
                   help="also judge the mean of the checkpoints from this fraction of the run on "
                        "(pipeline.average), beside the final policy")
    p.add_argument("--select-from", type=float, default=None, metavar="F",
                   help="also judge the checkpoint from this fraction of the run on with the highest "
                        "worst win rate against the run's anchors (pipeline.select), beside the final")
    p.add_argument("--select-episodes", type=int, default=200,
                   help="--select-from: episodes per candidate and anchor (default 200)")
    p.add_argument("--judge-only", action="store_true",
                   help="judge the finished run in --run-dir without training it (nor its curve)")
    p.add_argument("--judge", default="", metavar="WHICH",
                   help="the policies evaluated and exploited, of final, average and selected (default: "
                        "every one asked for); the round robin enters them all either way")
    args = p.parse_args(argv)
    for flag, value in (("--average-from", args.average_from), ("--select-from", args.select_from)):
        if value is not None and not 0.0 <= value <= 1.0:
            p.error(f"{flag} must be in [0, 1], got {value}")
    if args.select_episodes < 1:
        p.error(f"--select-episodes must be at least 1, got {args.select_episodes}")
    if args.judge_only and not args.run_dir:
        p.error("--judge-only needs the finished run's --run-dir")
    available = ["final", *(["average"] if args.average_from is not None else []),
                 *(["selected"] if args.select_from is not None else [])]
    wanted = [w.strip() for w in args.judge.split(",") if w.strip()] or available
    if not wanted or any(w not in available for w in wanted):
        p.error(f"--judge takes {', '.join(available)}, got {args.judge!r} (average needs "
                "--average-from, selected --select-from)")
    if args.exploiter_rounds < 0:
        p.error(f"--exploiter-rounds must be at least 0, got {args.exploiter_rounds}")
    if args.quick:
        args.steps, args.checkpoint_s, args.curve_points = 40_960, 5.0, 2
        args.episodes, args.curve_episodes, args.rr_episodes, args.rr_snapshots = 40, 16, 8, 1
        args.heldout_episodes, args.select_episodes = 8, 4
        args.exploiter_steps, args.exploiter_episodes = 40_960, 16
    tmp = None
    if args.run_dir:
        run_dir = Path(args.run_dir)
        judged_before = [run_dir / "exploiters" / w for w in wanted if (run_dir / "exploiters" / w).exists()]
        if args.judge_only and judged_before:
            p.error(f"{judged_before[0]} exists: that policy of the run was judged already (its "
                    "exploiters' runs are there; move them away to judge it again)")
    else:
        tmp = tempfile.TemporaryDirectory(prefix="learn_league_")
        run_dir = Path(tmp.name) / "run"
    argv_launch = ["--opponent", "league", "--display", "plain", "--metrics-port", "-1",
                   "--seed", str(args.seed), "--run-dir", str(run_dir), "--total-steps", str(args.steps),
                   "--set", "run.eval_episodes=0", "--set", f"run.checkpoint_interval_s={args.checkpoint_s}",
                   "--set", "run.keep_checkpoints=1000"]
    recipe = RECIPES[args.recipe]
    for kv in (*recipe, *args.set):  # the caller's settings come last and win
        argv_launch += ["--set", kv]
    if args.quick:
        argv_launch += ["--actors", "2", "--envs-per-actor", "16", "--rollout-len", "8",
                        "--set", "league.snapshot_every=2", "--set", "league.hold_chunks=8"]
    print(f"device: {os.cpu_count()} CPUs seen, load average {os.getloadavg()[0]:.2f} at start; "
          f"{args.steps:,} agent-steps; run {run_dir}; recipe {args.recipe}; settings "
          f"{' '.join((*recipe, *args.set))}",
          flush=True)
    start = time.perf_counter()
    if args.judge_only:
        print(f"training skipped (--judge-only): judging {run_dir}", flush=True)
        train_s: float | None = None
        time_to_95: float | None = None
    else:
        code, train_s, time_to_95 = train_and_curve(argv_launch, run_dir, args)
        if code != 0:
            print(f"training failed with exit code {code}; see {run_dir / 'run.log'}")
            return code
    final = str(run_dir / "checkpoints" / "latest.pt")
    judged = [("final", final)]
    if args.average_from is not None:
        average = run_dir / "checkpoints" / "average.pt"
        picked = checkpoints_since(run_dir / "checkpoints", args.average_from)
        average_checkpoints(picked, average, note=f"the mean of {len(picked)} checkpoints of {run_dir}")
        print(f"\naverage: the mean of the {len(picked)} checkpoints from {args.average_from:.4f} of the "
              f"run on ({picked[0].name} to {picked[-1].name}), {average}", flush=True)
        judged.append(("average", str(average)))
    if args.select_from is not None:
        with redirect_stdout(io.StringIO()) as table:
            selected = select_cli.main([str(run_dir), "--from", str(args.select_from),
                                        "--episodes", str(args.select_episodes), "--seed", str(args.seed + 13)])
        print(f"\nselected: the checkpoint from {args.select_from:.4f} of the run on with the highest worst "
              "win rate against the run's anchors (pipeline.select), " + table.getvalue().rstrip(), flush=True)
        judged.append(("selected", str(selected)))
    t0 = time.perf_counter()
    judgements = {label: judge(path, label, args) for label, path in judged if label in wanted}
    eval_s = time.perf_counter() - t0
    final_name = list_checkpoints(run_dir / "checkpoints")[-1].name  # the snapshot of the same version is the final
    snapshots = [str(q) for q in list_checkpoints(run_dir / "league") if q.name != final_name]
    labels = {path: label for label, path in judged}
    entrants = [*OPPONENTS, *snapshots[-args.rr_snapshots:], *labels]
    t0 = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        rr = evaluate_cli.main(["--round-robin", ",".join(entrants), "--episodes", str(args.rr_episodes),
                                "--seed", str(args.seed + 11), "--batch", str(min(args.rr_episodes, 1024))])
    rr_s = time.perf_counter() - t0
    ratings = sorted(rr["ratings"].items(), key=lambda kv: -kv[1]["elo"])
    print(f"\nround robin of {len(entrants)} ({args.rr_episodes} episodes per pair):")
    for name, r in ratings:
        print(f"  {rr_label(name, labels):24s} {r['elo']:7.0f} ± {r['stderr']:.0f}")
    top_label = rr_label(ratings[0][0], labels)
    for label, path in judged:
        if label not in wanted:
            continue
        exploit, exploiters = strongest_exploiter(path, 1 if args.quick else 3,
                                                  *((40_960, 16) if args.quick else (4_000_000, 400)),
                                                  seed=args.seed + 101, run_dir=run_dir / "exploiters" / label,
                                                  quick=args.quick)
        print(f"\nexploiters (fresh learners against the frozen {label} policy):")
        for match in exploiters:
            print("  " + match_line(match, label))
        judgements[label].update(exploit=exploit, exploiters=exploiters)
    trained = "skipped" if train_s is None else f"{train_s:.0f}s"
    print(f"\nwall time: training {trained}, evaluation {eval_s:.0f}s, round robin {rr_s:.0f}s, "
          f"total {time.perf_counter() - start:.0f}s; load average {os.getloadavg()[0]:.2f} at the end")
    for label, j in judgements.items():
        results, exploiters = j["results"], j["exploiters"]
        ladder_min = min(results[o]["win_rate"] for o in LADDER)
        exploit_wins = ",".join(f"{m['win_rate']:.3f}" for m in exploiters)
        print(f"{'RESULT' if label == 'final' else 'RESULT_' + label.upper()} "
              f"win_crank={results['crank']['win_rate']:.3f} win_random={results['random']['win_rate']:.3f} "
              f"win_ladder_min={ladder_min:.3f} win_heldout_min={j['heldout_min']:.3f} "
              f"exploit_win={j['exploit']['win_rate']:.3f} "
              f"exploit_wins={exploit_wins} top_rated={top_label} agent_steps={args.steps} "
              f"exploiter_rounds={args.exploiter_rounds} "
              f"time_to_95_s={'skipped' if train_s is None else 'none' if time_to_95 is None else f'{time_to_95:.0f}'} "
              f"train_s={'skipped' if train_s is None else f'{train_s:.0f}'} total_s={time.perf_counter() - start:.0f} quick={int(args.quick)}")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
