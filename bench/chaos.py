"""Chaos: training runs killed with SIGKILL at random moments, resumed until their budget is done.

Each of N runs is started with frequent checkpoints (so kills land during checkpoint writes too),
killed (its first launch as training begins, later ones after a random delay), then continued with ``--resume RUN_DIR`` (which may be killed again)
until a launch exits 0. Afterwards, for every run: ``latest.pt`` loads, its saved agent-step
count equals the budget, and nothing is left behind: no ``*.tmp`` file, no lock, no shared-memory
segment of a killed process in ``/dev/shm``. ``kills_mid_write`` counts the restarts that found
(and swept) a temporary file a killed writer left: kills that landed inside a write.

    python bench/chaos.py                # 20 runs
    python bench/chaos.py --quick        # 3 runs, for the test suite

The last line is ``RESULT kills= resumes= lost= leftovers= ...``; ``lost`` (runs whose final
checkpoint is missing, unloadable or short of the budget) and ``leftovers`` must be 0.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from learner.checkpoint import read_checkpoint  # noqa: E402

ACTORS, ENVS, ROLLOUT = 2, 16, 8
EARLY_KILL_P = 0.2
"""Share of kills aimed at start-up (before the run directory is claimed or while it is)."""
CHUNK = ENVS * ROLLOUT


def launch(run_dir: Path, budget: int, resume: bool) -> subprocess.Popen[bytes]:
    """One ``pipeline.launch`` child (a fresh run, or ``--resume`` of ``run_dir``)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1")
    if resume:
        args = ["--resume", str(run_dir)]
    else:
        args = ["--actors", str(ACTORS), "--envs-per-actor", str(ENVS), "--rollout-len", str(ROLLOUT),
                "--total-steps", str(budget), "--opponent", "straight", "--reward", "outcome",
                "--device", "cpu", "--run-dir", str(run_dir), "--display", "none",
                "--metrics-port", "-1", "--set", "run.eval_episodes=0",
                "--set", "run.checkpoint_interval_s=0.05", "--set", "ppo.hidden_sizes=[16, 16]",
                "--set", "ppo.update_epochs=1"]
    return subprocess.Popen([sys.executable, "-m", "pipeline.launch", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def shm_of(pids: set[int]) -> list[str]:
    """Shared-memory segments in /dev/shm whose name carries one of ``pids`` (torch names them
    ``torch_<pid>_...``)."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return []
    return [p.name for p in shm.iterdir() if any(f"_{pid}_" in p.name for pid in pids)]


def leftovers_in(run_dir: Path) -> list[str]:
    """Temporary files and locks left in a run directory."""
    found = [str(p.relative_to(run_dir)) for p in run_dir.rglob("*.tmp")]
    if (run_dir / ".lock").exists():
        found.append(".lock")
    return found


def chaos_run(run_dir: Path, budget: int, rng: random.Random, max_kills: int,
              kill_window_s: tuple[float, float]) -> tuple[int, int, set[int], str]:
    """Kill and resume one run until it finishes; (kills, resumes, child pids, last stderr)."""
    kills = resumes = 0
    pids: set[int] = set()
    resume = False
    while True:
        log = run_dir / "run.log"
        log_size = log.stat().st_size if log.exists() else 0
        proc = launch(run_dir, budget, resume)
        pids.add(proc.pid)
        if kills < max_kills:
            first = kills == 0 and not resume
            if first or rng.random() >= EARLY_KILL_P:
                # Training has begun once this launch writes to the run log (after it claimed the
                # directory); kill within the next seconds, while checkpoints are written.
                deadline = time.monotonic() + 60
                while (proc.poll() is None and time.monotonic() < deadline
                       and (not log.exists() or log.stat().st_size <= log_size)):
                    time.sleep(0.02)
            try:
                # The first launch of every run dies as training begins (so each run is killed
                # at least once, however fast the machine); later ones at a random moment.
                proc.wait(timeout=0.0 if first else rng.uniform(*kill_window_s))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                # A run killed before it wrote its config is started again, else resumed.
                resume = (run_dir / "config.toml").exists()
                resumes += resume
                continue
        try:
            _, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        text = err.decode(errors="replace")
        if proc.returncode == 0:
            return kills, resumes, pids, text
        return kills, resumes, pids, f"exit code {proc.returncode}: {text[-2000:]}"


def main(argv: list[str] | None = None) -> int:
    """Run the chaos rounds, print one line per run and the RESULT line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="3 runs of a smaller budget")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-kills", type=int, default=3, help="SIGKILLs per run at most")
    args = p.parse_args(argv)
    runs = 3 if args.quick else args.runs
    budget = (12 if args.quick else 24) * ACTORS * CHUNK
    rng = random.Random(args.seed)
    total_kills = total_resumes = lost = leftovers = mid_write = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        for i in range(runs):
            run_dir = Path(tmp) / f"run{i}"
            kills, resumes, pids, err = chaos_run(run_dir, budget, rng, args.max_kills, (0.0, 3.0))
            total_kills += kills
            total_resumes += resumes
            problems = leftovers_in(run_dir) + shm_of(pids)
            log = run_dir / "run.log"
            swept = log.read_text().count("temporary file(s) a killed run left") if log.exists() else 0
            mid_write += swept
            leftovers += len(problems)
            try:
                state = read_checkpoint(run_dir / "checkpoints" / "latest.pt")
                steps = int(state["extra"]["agent_steps"])
            except Exception as exc:  # any failure to load is a lost run
                last = err.strip().splitlines()[-1] if err.strip() else "exit code 0"
                steps, err = -1, f"{type(exc).__name__}: {exc} (the last launch: {last})"
            ok = steps == budget
            lost += not ok
            print(f"run {i}: kills {kills} resumes {resumes} agent-steps {steps}/{budget}"
                  f"{'' if ok else ' LOST ' + err.strip().splitlines()[-1] if err.strip() else ' LOST'}"
                  f"{' leftovers ' + ', '.join(problems) if problems else ''}", flush=True)
    print(f"RESULT kills={total_kills} resumes={total_resumes} lost={lost} leftovers={leftovers} "
          f"kills_mid_write={mid_write} runs={runs} budget={budget} "
          f"wall_s={time.perf_counter() - start:.0f}")
    return 0 if lost == 0 and leftovers == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
