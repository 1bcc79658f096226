"""Run the two-rank gloo test many times in a row while other processes keep every core busy.

The data-parallel test starts ``torchrun`` with two ranks; on a loaded machine its rendezvous,
collectives and shutdown run slower and in other interleavings than on an idle one, which is
where ordering bugs show. This script makes that condition on purpose and counts the outcomes.

Usage::

    python bench/stress_distributed.py [--runs 20] [--load 2] [--load-kind spin|matmul]
                                       [--test tests/test_learner_distributed.py] [--stop-on-fail]

``--load`` processes (default: one per core) spin in pure Python (``spin``) or run single-thread
float32 matmuls (``matmul``) for the whole run and are killed, by their own pids, at the end.
Each test run is a fresh ``pytest`` process. The last line printed is
``RESULT runs=N passed=P failed=F consecutive_passes=C load=L kind=K``; the tail of every
failing run's output is printed above it. Exit status 0 only if every run passed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_LOAD_CODE = {
    "spin": "while True: pass",
    "matmul": ("import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\n"
               "while True: a = torch.tanh(a @ a)"),
}


def start_load(n: int, kind: str) -> list[subprocess.Popen[bytes]]:
    """``n`` busy processes of ``kind``; the caller kills them."""
    return [subprocess.Popen([sys.executable, "-c", _LOAD_CODE[kind]]) for _ in range(n)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--load", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--load-kind", choices=sorted(_LOAD_CODE), default="spin")
    parser.add_argument("--test", default="tests/test_learner_distributed.py")
    parser.add_argument("--stop-on-fail", action="store_true")
    args = parser.parse_args()

    load = start_load(args.load, args.load_kind)
    passed = failed = streak = best_streak = 0
    try:
        time.sleep(1.0)  # let the load reach full speed before the first run
        for i in range(1, args.runs + 1):
            t0 = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", args.test],
                cwd=REPO, capture_output=True, text=True)
            dt = time.monotonic() - t0
            ok = proc.returncode == 0
            passed += ok
            failed += not ok
            streak = streak + 1 if ok else 0
            best_streak = max(best_streak, streak)
            print(f"run {i:3d}: {'pass' if ok else 'FAIL'} rc={proc.returncode} {dt:5.1f}s",
                  flush=True)
            if not ok:
                print((proc.stdout + proc.stderr)[-4000:], flush=True)
                if args.stop_on_fail:
                    break
    finally:
        for p in load:
            p.kill()
        for p in load:
            p.wait()
    print(f"RESULT runs={passed + failed} passed={passed} failed={failed} "
          f"consecutive_passes={best_streak} load={args.load} kind={args.load_kind}")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
