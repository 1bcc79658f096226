"""``python -m pipeline.plot RUN [RUN...] --png OUT``: learning curves of one or more runs.

Reads each run's ``progress.csv`` (:mod:`pipeline.run.progress_log`) and draws, overlaid, the win
rate and the mean return against agent-steps (left) and against wall time (right), one line per
run and opponent (a run on a Gymnasium env has returns only). Drawn with matplotlib (the
``viz`` extra). Bad input (a folder without ``progress.csv``, a file without rows, a missing
package) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.command import CommandParser, run_command
from pipeline.drawing.png import require_matplotlib, save_figure
from pipeline.drawing.report import say
from pipeline.run.progress_log import PROGRESS_FILE, read_progress

Curve = dict[str, list[float]]


def load_curves(run: Path) -> dict[str, Curve]:
    """Opponent -> columns (agent_steps, wall_s, win_rate, return_mean) of ``run``'s rows that
    have them (a row with no finished episode has no rate)."""
    path = run / PROGRESS_FILE if run.is_dir() else run
    if not path.is_file():
        raise ValueError(f"{run}: no {PROGRESS_FILE} (give a run directory written by pipeline.launch)")
    rows = read_progress(path)
    if not rows:
        raise ValueError(f"{path}: no progress rows yet")
    curves: dict[str, Curve] = {}
    for row in rows:
        c = curves.setdefault(row.get("opponent") or "?", {k: [] for k in ("agent_steps", "wall_s", "win_rate", "return_mean")})
        if not row.get("return_mean"):
            continue
        c["agent_steps"].append(float(row["agent_steps"]))
        c["wall_s"].append(float(row["wall_s"]))
        c["win_rate"].append(float(row["win_rate"]) if row.get("win_rate") else float("nan"))
        c["return_mean"].append(float(row["return_mean"]))
    return {k: v for k, v in curves.items() if v["agent_steps"]}


def plot_runs(runs: list[Path], out: Path, title: str = "", opponents: list[str] | None = None) -> int:
    """Draw the curves of ``runs`` into ``out`` (PNG), only against ``opponents`` if given (a
    league run has one per snapshot); returns the number of lines per panel."""
    plt = require_matplotlib("pipeline.plot")
    data = [(run, {o: c for o, c in load_curves(run).items() if not opponents or o in opponents})
            for run in runs]
    if not any(curves for _, curves in data):
        raise ValueError(f"no curves to draw{' against ' + ', '.join(opponents) if opponents else ''}")
    has_wins = any(any(v == v for v in c["win_rate"]) for _, curves in data for c in curves.values())
    rows = [("win_rate", "win rate"), ("return_mean", "mean return")] if has_wins else [("return_mean", "mean return")]
    fig, axes = plt.subplots(len(rows), 2, figsize=(12, 4 * len(rows)), squeeze=False)
    lines = 0
    try:
        for run, curves in data:
            for opponent, c in curves.items():
                label = f"{run.name} vs {opponent}" if len(curves) > 1 or has_wins else run.name
                lines += 1
                for r, (key, _name) in enumerate(rows):
                    axes[r][0].plot(c["agent_steps"], c[key], marker=".", lw=1.5, label=label)
                    axes[r][1].plot(c["wall_s"], c[key], marker=".", lw=1.5, label=label)
        for r, (key, name) in enumerate(rows):
            for col, xlabel in enumerate(("agent-steps", "wall time (s)")):
                ax = axes[r][col]
                ax.set_xlabel(xlabel)
                ax.set_ylabel(name)
                ax.grid(True, color="#e0e0e0")
                if key == "win_rate":
                    ax.set_ylim(-0.02, 1.02)
        axes[0][0].legend(fontsize=8)
        fig.suptitle(title or "learning curves: " + ", ".join(r.name for r in runs), fontsize=11)
        fig.tight_layout()
        save_figure(fig, out)
    finally:
        plt.close(fig)
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="python -m pipeline.plot", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories (or progress.csv files)")
    p.add_argument("--png", type=Path, required=True, metavar="OUT", help="the picture to write")
    p.add_argument("--title", default="", help="the figure's title")
    p.add_argument("--opponents", metavar="A,B", help="only the curves against these opponents "
                   "(e.g. the anchors of a league run)")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.png.is_dir() or not args.png.parent.is_dir():
        raise ValueError(f"--png {args.png}: give a file name in an existing folder")
    opponents = [o.strip() for o in args.opponents.split(",") if o.strip()] if args.opponents else None
    lines = plot_runs(args.runs, args.png, args.title, opponents)
    say(f"wrote {args.png} ({len(args.runs)} runs, {lines} curves)")


def run(argv: list[str] | None = None) -> None:
    """Command-line entry: bad input is one line on stderr and exit status 2 (a failed write,
    status 1)."""
    run_command(main, argv, (ValueError, ImportError))


if __name__ == "__main__":
    run(sys.argv[1:])
