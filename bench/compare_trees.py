"""Two checkouts side by side: the same benchmark scripts run in each, alternating, in one run.

A change that should not move a figure (a refactor, a dependency bump) is measured against the
commit before it on the same machine, under the same load, in the same minutes: each benchmark
runs in the old checkout, then the new one, then again in the old and the new (``--rounds``),
and the ``RESULT key=value`` lines each script prints are collected per checkout. For every
numeric field the median over rounds is printed for both, with the ratio new / old.

    git worktree add /tmp/old <commit>
    python bench/compare_trees.py --old /tmp/old --new .            # pipeline, actor, sim --quick
    python bench/compare_trees.py --old /tmp/old --new . --bench "bench/sim.py --quick"

Each script runs as ``python SCRIPT ARGS`` with the checkout as its working directory, so it
imports that checkout's packages. The last line is ``RESULT key=value ...`` with the ratios.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_BENCHES = ("bench/pipeline.py", "bench/actor.py", "bench/sim.py --quick")


def parse_result(output: str) -> dict[str, str]:
    """The fields of the last ``RESULT`` line of ``output`` (empty if there is none)."""
    lines = [ln for ln in output.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        return {}
    fields = {}
    for token in lines[-1].split()[1:]:
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
    return fields


def run_bench(tree: Path, command: str, timeout_s: float) -> tuple[dict[str, str], float]:
    """Run ``python COMMAND`` in ``tree``; its RESULT fields and its wall time."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *shlex.split(command)], cwd=tree, capture_output=True,
                          text=True, timeout=timeout_s)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise SystemExit(f"error: `{command}` failed in {tree} (exit {proc.returncode}):\n{tail}")
    fields = parse_result(proc.stdout)
    if not fields:
        raise SystemExit(f"error: `{command}` printed no RESULT line in {tree}")
    return fields, wall


def numeric(fields: list[dict[str, str]]) -> dict[str, float]:
    """The median over rounds of every field that parses as a number in all of them."""
    out = {}
    for key in fields[0]:
        try:
            values = [float(f[key]) for f in fields]
        except (KeyError, ValueError):
            continue
        out[key] = statistics.median(values)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", type=Path, required=True, help="the baseline checkout")
    p.add_argument("--new", type=Path, required=True, help="the checkout measured against it")
    p.add_argument("--bench", action="append", default=None, metavar="'SCRIPT ARGS'",
                   help="a benchmark command, relative to each checkout (repeatable; default: "
                        + ", ".join(DEFAULT_BENCHES) + ")")
    p.add_argument("--rounds", type=int, default=2, help="old/new pairs per benchmark (default 2)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds one benchmark run may take")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    for tree in (args.old, args.new):
        if not (tree / "bench").is_dir():
            p.error(f"{tree} is not a checkout of this project (no bench/ folder)")
    ratios: dict[str, float] = {}
    for command in args.bench or DEFAULT_BENCHES:
        results: dict[str, list[dict[str, str]]] = {"old": [], "new": []}
        for r in range(args.rounds):
            for name, tree in (("old", args.old), ("new", args.new)):
                fields, wall = run_bench(tree, command, args.timeout)
                results[name].append(fields)
                print(f"[{command}] round {r + 1} {name}: {wall:.0f} s  RESULT "
                      + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)
        old, new = numeric(results["old"]), numeric(results["new"])
        print(f"\n{command}: median of {args.rounds} round(s)")
        print(f"{'field':<34}{'old':>14}{'new':>14}{'new/old':>10}")
        for key in old:
            if key not in new:
                continue
            ratio = new[key] / old[key] if old[key] else float("nan")
            print(f"{key:<34}{old[key]:>14.4g}{new[key]:>14.4g}{ratio:>10.3f}")
            if key.endswith("_per_s") or key.startswith("x_") or key.endswith("_over_sync"):
                ratios[f"{Path(shlex.split(command)[0]).stem}.{key}"] = ratio
        print()
    print("RESULT " + " ".join(f"{k}={v:.3f}" for k, v in ratios.items()))


if __name__ == "__main__":
    main()
