"""Learning evidence on a known reference: PPO on Gymnasium CartPole-v1.

CleanRL's PPO (4 envs × 128 steps, 4 minibatches, 4 epochs, lr 2.5e-4 annealed, 64×64 tanh)
reaches a mean return in the 475–500 range within 500k steps; this runs the same settings through
``learner.gym_loop.train_gym``. The baseline, measured in the same run, is the random policy's
mean return; the ratio is trained / random.

    python bench/learn_cartpole.py            # 500k steps
    python bench/learn_cartpole.py --quick    # 60k steps, well under a minute
    python bench/learn_cartpole.py --pipeline # and the same budget through pipeline.launch
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from learner import PPOConfig
from learner.gym_loop import GymTrainResult, random_policy_return, train_gym


def main() -> None:
    """Train, print the learning curve and a final ``RESULT`` line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="60k steps instead of 500k")
    parser.add_argument("--steps", type=int, default=None, help="override the number of env steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--pipeline", action="store_true",
                        help="also train through pipeline.launch --env gym:CartPole-v1, same budget")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    total = args.steps or (60_000 if args.quick else 500_000)
    num_envs, num_steps = 4, 128
    updates = total // (num_envs * num_steps)
    cfg = PPOConfig(hidden_sizes=(64, 64), learning_rate=2.5e-4, total_updates=updates, seed=args.seed)

    t0 = time.perf_counter()
    baseline = random_policy_return("CartPole-v1", 100, args.seed)
    print(f"random policy: mean return {baseline:.1f} over 100 episodes ({time.perf_counter() - t0:.1f} s)")
    print(f"{'env_steps':>10} {'mean_return(last 20)':>21} {'wall_s':>7}")
    every = max(updates // 20, 1)
    start = time.perf_counter()

    def progress(update: int, stats: dict[str, float], result: GymTrainResult) -> None:
        if (update + 1) % every == 0 or update + 1 == updates:
            print(f"{result.env_steps:>10} {result.mean_return(20):>21.1f} {time.perf_counter() - start:>7.1f}",
                  flush=True)

    episode_times: list[float] = []  # wall time of the update after each episode ended

    def progress_and_times(update: int, stats: dict[str, float], result: GymTrainResult) -> None:
        progress(update, stats, result)
        episode_times.extend([time.perf_counter() - start] * (len(result.episode_returns) - len(episode_times)))

    result = train_gym("CartPole-v1", cfg, total, num_envs, num_steps, seed=args.seed,
                       progress_fn=progress_and_times)
    final = result.mean_return(20)
    reached, reached_s = first_475(result.episode_end_steps, episode_times, result.episode_returns)
    print(f"RESULT env=CartPole-v1 env_steps={result.env_steps} mean_return_last20={final:.1f} "
          f"random_return={baseline:.1f} ratio_vs_random={final / baseline:.2f} steps_to_475={reached} "
          f"wall_s_to_475={reached_s:.1f} wall_s={result.wall_s:.1f} device=cpu threads={args.threads}")
    if args.pipeline:
        pipeline_row(total, args.seed, reached_s)


def first_475(steps: list[int], times: list[float], returns: list[float]) -> tuple[int, float]:
    """The env step and the wall time at which the mean of the last 20 finished episodes first
    reached 475 (-1 and NaN if never)."""
    for i in range(19, len(returns)):
        if np.mean(returns[i - 19:i + 1]) >= 475:
            return steps[i], times[i]
    return -1, float("nan")


def pipeline_row(total: int, seed: int, loop_s_to_475: float) -> None:
    """The same budget through ``python -m pipeline.launch --env gym:CartPole-v1`` (its defaults:
    4 actors × 4 envs × 32 steps, 4 chunks a batch), in this run."""
    import tempfile

    from pipeline.config import resolve
    from pipeline.config.flags import parse_config
    from pipeline.launch import run

    with tempfile.TemporaryDirectory() as tmp:
        config = resolve(parse_config([
            "--env", "gym:CartPole-v1", "--total-steps", str(total), "--seed", str(seed),
            "--device", "cpu", "--display", "none", "--metrics-port", "-1", "--run-dir", f"{tmp}/run",
            "--set", "run.eval_episodes=0"]))
        result = run(config)
    episodes = result.episode_returns
    steps, times, returns = ([e[i] for e in episodes] for i in range(3))
    reached, reached_s = first_475(steps, times, returns)  # type: ignore[arg-type]
    final = float(np.mean(returns[-20:])) if returns else float("nan")
    print(f"RESULT pipeline env=CartPole-v1 env_steps={result.agent_steps} mean_return_last20={final:.1f} "
          f"steps_to_475={reached} wall_s_to_475={reached_s:.1f} wall_s={result.wall_s:.1f} "
          f"loop_over_pipeline_time_to_475={loop_s_to_475 / reached_s:.2f}")


if __name__ == "__main__":
    main()
