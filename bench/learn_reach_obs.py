"""Does the reach block in the observation (``SimConfig.obs_reach``: own reach, the enemy's reach
against an escape turn, the escape time margin) speed up learning against ``crank``? One run.

Both arms train with ``python -m pipeline.launch`` on the same budget, opponent ``crank``, the
default ``shaped`` reward, one actor on the CPU; they differ only in ``--set sim.obs_reach=true``.
Each seed runs both arms one after the other. Reported per run: the rolling win rate against
crank during training (the launcher's live line) at quarters of the budget, the end-of-run
evaluation's win rate against crank with its 95 % interval, and the wall time; then the mean of
each arm and the machine's load average before and after (the machine may be shared).

    python bench/learn_reach_obs.py                  # 2 seeds x 2 arms x 300k agent-steps
    python bench/learn_reach_obs.py --quick          # 1 seed x 2 arms x 60k agent-steps

The last line is ``RESULT ...``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIVE = re.compile(r"steps (\d+)/\d+ .*? win/draw/loss ([\d.]+)%/([\d.]+)%/([\d.]+)% of (\d+) vs crank")
EVAL = re.compile(r"\scrank\s+(\d+)\s+([\d.]+)% \[\s*([\d.]+)%,\s*([\d.]+)%\]")


def run_arm(obs_reach: bool, seed: int, steps: int, run_dir: Path) -> dict[str, object]:
    """One training run; returns the live win-rate points, the evaluation and the wall time."""
    cmd = [sys.executable, "-m", "pipeline.launch", "--actors", "1", "--device", "cpu",
           "--total-steps", str(steps), "--opponent", "crank", "--seed", str(seed),
           "--display", "plain", "--metrics-port", "-1", "--run-dir", str(run_dir)]
    if obs_reach:
        cmd += ["--set", "sim.obs_reach=true"]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    live = [(int(m[1]), float(m[2])) for m in LIVE.finditer(done.stdout)]
    ev = EVAL.search(done.stdout)
    if ev is None:
        raise RuntimeError(f"no evaluation against crank in the output:\n{done.stdout[-2000:]}")
    return {"cmd": " ".join(cmd[1:]), "live": live, "eval_n": int(ev[1]), "eval_win": float(ev[2]),
            "eval_lo": float(ev[3]), "eval_hi": float(ev[4]), "wall_s": wall}


def live_at(live: list[tuple[int, float]], step: int) -> float:
    """The live rolling win rate (%) at the first report at or after ``step``."""
    for s, w in live:
        if s >= step:
            return w
    return live[-1][1] if live else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300_000, help="agent-steps per run")
    p.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    p.add_argument("--quick", action="store_true", help="one seed, 60k agent-steps")
    args = p.parse_args(argv)
    steps = 60_000 if args.quick else args.steps
    seeds = [0] if args.quick else [int(s) for s in args.seeds.split(",")]
    quarters = [steps // 4, steps // 2, 3 * steps // 4, steps]
    load_before = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f} / {load_before[1]:.1f} / "
          f"{load_before[2]:.1f}; {steps:,} agent-steps per run, seeds {seeds}")
    results: dict[bool, list[dict[str, object]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="learn-reach-") as tmp:
        for seed in seeds:
            for arm in (False, True):
                r = run_arm(arm, seed, steps, Path(tmp) / f"{'reach' if arm else 'base'}-{seed}")
                results[arm].append(r)
                live = r["live"]
                assert isinstance(live, list)
                print(f"obs_reach={'on ' if arm else 'off'} seed {seed}: live win vs crank at "
                      + ", ".join(f"{q // 1000}k {live_at(live, q):.1f}%" for q in quarters)
                      + f"; evaluation {r['eval_win']:.1f}% [{r['eval_lo']:.1f}, {r['eval_hi']:.1f}] "
                        f"of {r['eval_n']}; {r['wall_s']:.0f} s")
    print(f"command: python {results[True][0]['cmd']}")
    load_after = os.getloadavg()

    def mean(arm: bool, key: str) -> float:
        vals = [float(r[key]) for r in results[arm]]  # type: ignore[arg-type]
        return sum(vals) / len(vals)

    def mean_live(arm: bool, q: int) -> float:
        vals = [live_at(r["live"], q) for r in results[arm]]  # type: ignore[arg-type]
        return sum(vals) / len(vals)

    for arm in (False, True):
        print(f"mean obs_reach={'on ' if arm else 'off'}: live "
              + ", ".join(f"{q // 1000}k {mean_live(arm, q):.1f}%" for q in quarters)
              + f"; evaluation {mean(arm, 'eval_win'):.1f}%; {mean(arm, 'wall_s'):.0f} s per run")
    print(f"load average after {load_after[0]:.1f} / {load_after[1]:.1f} / {load_after[2]:.1f}")
    print("RESULT " + " ".join(f"{k}={v}" for k, v in {
        "steps": steps, "seeds": len(seeds),
        "eval_win_off": f"{mean(False, 'eval_win'):.1f}", "eval_win_on": f"{mean(True, 'eval_win'):.1f}",
        "live_half_off": f"{mean_live(False, steps // 2):.1f}", "live_half_on": f"{mean_live(True, steps // 2):.1f}",
        "live_end_off": f"{mean_live(False, steps):.1f}", "live_end_on": f"{mean_live(True, steps):.1f}",
        "wall_s_off": f"{mean(False, 'wall_s'):.0f}", "wall_s_on": f"{mean(True, 'wall_s'):.0f}",
        "load_before": f"{load_before[0]:.1f}", "load_after": f"{load_after[0]:.1f}",
    }.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
