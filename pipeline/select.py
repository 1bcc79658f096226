"""``python -m pipeline.select RUN``: keep the run's checkpoint with the fewest holes.

Plays each of the run's numbered checkpoints from ``--from`` of its agent-steps on (default 2/3:
in the league's recipes, the stretch after the last snapshot), or its ``--last N``, against the
validation opponents (default: the run's own league anchors, from ``RUN/config.toml``; never a
held-out tactic, which is refused), ``--episodes`` each from the same seeded starts, and writes
the one with the highest worst win rate (:mod:`pipeline.evaluation.selection`) as a policy-only
file (default ``RUN/checkpoints/selected.pt``), atomically. The file flies and is evaluated like
any checkpoint:

    python -m pipeline.select runs/<run>
    python -m pipeline.evaluate --agent runs/<run>/checkpoints/selected.pt --opponents crank,random
    python -m pipeline.select runs/<run> --last 5 --opponents "crank,tactic:pump?train" --out best.pt

It prints one row per candidate (its agent-steps, worst and mean win rate, the opponent it does
worst against) and which was kept. Bad input (no numbered checkpoints, a held-out validation
opponent, a damaged file) is one line on stderr and exit status 2; a failed write, status 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

from core.command import CommandParser, run_command
from learner.checkpoint import read_checkpoint
from learner.checkpoint.average import LATE_FROM, late_checkpoints
from learner.checkpoint.export import policy_state
from learner.checkpoint.saving import atomic_torch_save
from pipeline.evaluation.checks import check_device
from pipeline.evaluation.selection import pick, run_anchors, validate

SELECTED_NAME = "selected.pt"


def build_parser() -> CommandParser:
    p = CommandParser(prog="python -m pipeline.select", description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a run directory (or its checkpoints folder)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--from", dest="fraction", type=float, default=None,
                       help="candidates: the checkpoints written from this fraction of the run's "
                            f"agent-steps on (default {LATE_FROM:.4f})")
    which.add_argument("--last", type=int, default=None, help="candidates: the newest N numbered checkpoints")
    p.add_argument("--opponents", default="",
                   help="comma-separated validation opponents (default: the run's league anchors); "
                        "held-out tactics are refused")
    p.add_argument("--episodes", type=int, default=200, help="episodes per candidate and opponent (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, help=f"the file to write (default: CHECKPOINTS/{SELECTED_NAME})")
    return p


def main(argv: list[str] | None = None) -> Path:
    args = build_parser().parse_args(argv)
    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
    device = check_device(args.device)
    folder, candidates = late_checkpoints(args.run, args.fraction, args.last)
    run_dir = args.run if (args.run / "config.toml").is_file() else folder.parent
    opponents = [o for o in args.opponents.split(",") if o.strip()] or run_anchors(run_dir)
    out = args.out or folder / SELECTED_NAME
    if out.is_dir() or not out.parent.is_dir():
        raise ValueError(f"--out {out}: give a file name in an existing folder")
    print(f"{len(candidates)} candidate(s) of {folder} against {len(opponents)} validation opponent(s), "
          f"{args.episodes} episodes each: {', '.join(opponents)}", flush=True)
    scored = validate(candidates, opponents, args.episodes, seed=args.seed, device=device)
    chosen = pick(scored)
    print(f"  {'checkpoint':22s} {'agent-steps':>12s} {'worst':>7s} {'mean':>7s}  weakest against")
    for c in scored:
        steps = f"{c.agent_steps:,}" if c.agent_steps is not None else "?"
        mark = "  <- kept" if c is chosen else ""
        print(f"  {c.path.name:22s} {steps:>12s} {c.worst:7.1%} {c.mean:7.1%}  {c.weakest}{mark}")
    state = policy_state(read_checkpoint(chosen.path), note=f"selected from {len(scored)} checkpoints of {run_dir}")
    state["extra"]["selected"] = {
        "checkpoint": chosen.path.name,
        "episodes": args.episodes,
        "seed": args.seed,
        "candidates": [{"checkpoint": c.path.name, "agent_steps": c.agent_steps, "win_rates": c.win_rates}
                       for c in scored],
    }
    atomic_torch_save(state, out)
    print(f"wrote {out}: {chosen.path.name} (worst {chosen.worst:.1%} against {chosen.weakest}, mean {chosen.mean:.1%})")
    return out


def run(argv: list[str] | None = None) -> None:
    """Command-line entry: bad input is one line on stderr and exit status 2 (a failed write,
    status 1)."""
    run_command(main, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
