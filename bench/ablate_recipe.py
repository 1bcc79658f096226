"""Which recipe makes the best fighter per minute: opponent mix, reward and network, one run.

Each arm is ``python -m pipeline.launch --actors 4`` with the CPU defaults and the same
agent-step budget, changed in one respect; its final policy is then evaluated against every
scripted opponent (``pipeline.evaluate``, ``--episodes`` per opponent, each start from both
sides). The table gives the win rates with Wilson intervals and the training wall time.

    python bench/ablate_recipe.py                      # every arm, 600k agent-steps each
    python bench/ablate_recipe.py --arms crank_shaped,league_shaped --steps 300000
    python bench/ablate_recipe.py --quick
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline import evaluate as evaluate_cli
from pipeline.launch import main as launch

OPPONENTS = ("crank", "random", "straight", "pursuit", "shooter")

ARMS: dict[str, list[str]] = {
    "crank_shaped": ["--opponent", "crank", "--reward", "shaped"],
    "crank_outcome": ["--opponent", "crank", "--reward", "outcome"],
    "league_shaped": ["--opponent", "league", "--reward", "shaped"],
    "league_outcome": ["--opponent", "league", "--reward", "outcome"],
    "league_shaped_net128": ["--opponent", "league", "--reward", "shaped",
                             "--set", "ppo.hidden_sizes=[128, 128]"],
    "crank_shaped_net128": ["--opponent", "crank", "--reward", "shaped",
                            "--set", "ppo.hidden_sizes=[128, 128]"],
    "league_shaped_net256": ["--opponent", "league", "--reward", "shaped",
                             "--set", "ppo.hidden_sizes=[256, 256]"],
    "league_shaped_net32": ["--opponent", "league", "--reward", "shaped",
                            "--set", "ppo.hidden_sizes=[32, 32]"],
}
"""Arm name → what it changes from the CPU defaults (64×64 network)."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    p.add_argument("--steps", type=int, default=600_000, help="agent-steps per arm")
    p.add_argument("--episodes", type=int, default=200, help="evaluation episodes per opponent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny budgets: the mechanics only")
    args = p.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        p.error(f"unknown arm(s) {unknown}; expected some of {', '.join(ARMS)}")
    extra: list[str] = []
    if args.quick:
        args.steps, args.episodes = 8192, 16
        extra = ["--actors", "2", "--envs-per-actor", "16", "--rollout-len", "8",
                 "--set", "league.hold_chunks=8"]
    print(f"device: {os.cpu_count()} CPUs seen, load average {os.getloadavg()[0]:.2f} at start; "
          f"{args.steps:,} agent-steps per arm, {args.episodes} evaluation episodes per opponent", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ablate_") as tmp:
        for arm in arms:
            run_dir = Path(tmp) / arm
            t0 = time.perf_counter()
            with redirect_stdout(io.StringIO()):
                code = launch([*ARMS[arm], *extra, "--total-steps", str(args.steps), "--seed", str(args.seed),
                               "--run-dir", str(run_dir), "--display", "none", "--metrics-port", "-1",
                               "--set", "run.eval_episodes=0"])
            train_s = time.perf_counter() - t0
            if code != 0:
                print(f"{arm}: training failed with exit code {code}")
                return code
            with redirect_stdout(io.StringIO()):
                payload = evaluate_cli.main(["--agent", str(run_dir / "checkpoints" / "latest.pt"),
                                             "--opponents", ",".join(OPPONENTS), "--episodes",
                                             str(args.episodes), "--seed", str(args.seed + 5),
                                             "--batch", str(min(args.episodes, 1024))])
            res = {m["opponent"]: m for m in payload["matches"]}
            rows.append((arm, train_s, res))
            print(f"{arm:22s} {train_s:6.0f}s  " + "  ".join(
                f"{o} {res[o]['win_rate']:6.1%} [{res[o]['win_ci95'][0]:.1%}, {res[o]['win_ci95'][1]:.1%}]"
                for o in OPPONENTS), flush=True)
    best = max(rows, key=lambda r: (r[2]["crank"]["win_rate"], min(r[2][o]["win_rate"] for o in OPPONENTS)))
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    print("RESULT " + " ".join(f"{arm}_crank={res['crank']['win_rate']:.3f}" for arm, _, res in rows)
          + f" best={best[0]} steps={args.steps}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
