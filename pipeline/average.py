"""``python -m pipeline.average RUN``: one policy, the mean of a run's late checkpoints.

Averages the weights of the numbered checkpoints a run kept (``RUN/checkpoints/ckpt_*.pt``)
from ``--from`` of its agent-steps on (default 2/3: in the league's recipes, the stretch after
the last snapshot, when the pool no longer changes), or the ``--last N``, or the checkpoint
files named, into a policy-only file (:mod:`learner.checkpoint.average`; default
``RUN/checkpoints/average.pt``), written atomically. The file flies and is evaluated like any
checkpoint:

    python -m pipeline.average runs/<run>
    python -m pipeline.evaluate --agent runs/<run>/checkpoints/average.pt --opponents crank,random
    python -m pipeline.average runs/<run> --last 10 --out best.pt
    python -m pipeline.average ckpt_000000100.pt ckpt_000000200.pt --out mean.pt

A run keeps its newest ``run.keep_checkpoints`` numbered checkpoints (default 3); keep more
(``--set run.keep_checkpoints=1000``) to average over a longer stretch. Bad input (no numbered
checkpoints, checkpoints of different networks, layouts or simulators, a damaged file) is one
line on stderr and exit status 2; a failed write, status 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.command import CommandParser, run_command
from learner.checkpoint.average import LATE_FROM, average_checkpoints, late_checkpoints
from learner.checkpoint.files import CheckpointError
from learner.checkpoint.loading import read_checkpoint

AVERAGE_NAME = "average.pt"


def build_parser() -> CommandParser:
    p = CommandParser(prog="python -m pipeline.average", description=__doc__.split("\n\n")[0])
    p.add_argument("sources", nargs="+", type=Path,
                   help="a run directory or checkpoints folder, or the checkpoint files to average")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--from", dest="fraction", type=float, default=None,
                       help="average the checkpoints written from this fraction of the run's "
                            f"agent-steps on (default {LATE_FROM:.4f})")
    which.add_argument("--last", type=int, default=None, help="average the newest N numbered checkpoints")
    p.add_argument("--out", type=Path, help=f"the file to write (default: CHECKPOINTS/{AVERAGE_NAME})")
    p.add_argument("--note", default="", help="kept in the file: e.g. the command that trained the run")
    return p


def select(args: argparse.Namespace) -> tuple[list[Path], Path]:
    """The checkpoints to average and the default output path for the parsed ``args``."""
    sources: list[Path] = args.sources
    fraction: float | None = args.fraction
    last: int | None = args.last
    if len(sources) > 1 or sources[0].is_file():
        if fraction is not None or last is not None:
            raise ValueError("--from and --last choose among a run's checkpoints; give a run "
                             "directory, or name the checkpoint files without them")
        missing = [p for p in sources if not p.is_file()]
        if missing:
            raise CheckpointError(f"no checkpoint file at {missing[0]}")
        return list(sources), sources[-1].parent / AVERAGE_NAME
    folder = sources[0]
    if not folder.is_dir():
        raise CheckpointError(f"no run directory, checkpoints folder or checkpoint file at {folder}")
    checkpoints, picked = late_checkpoints(folder, fraction, last)
    return picked, checkpoints / AVERAGE_NAME


def main(argv: list[str] | None = None) -> Path:
    args = build_parser().parse_args(argv)
    paths, default_out = select(args)
    out = args.out or default_out
    if out.is_dir() or not out.parent.is_dir():
        raise ValueError(f"--out {out}: give a file name in an existing folder")
    average_checkpoints(paths, out, note=args.note)
    averaged = read_checkpoint(out)["extra"]["averaged"]
    steps = [s for s in averaged["agent_steps"] if isinstance(s, int)]
    span = f", agent-steps {min(steps):,} to {max(steps):,}" if steps else ""
    print(f"wrote {out}: the mean of {averaged['checkpoints']} checkpoint(s), policy versions "
          f"{averaged['policy_versions'][0]} to {averaged['policy_versions'][-1]}{span}")
    return out


def run(argv: list[str] | None = None) -> None:
    """Command-line entry: bad input is one line on stderr and exit status 2 (a failed write,
    status 1)."""
    run_command(main, argv)


if __name__ == "__main__":
    run(sys.argv[1:])
