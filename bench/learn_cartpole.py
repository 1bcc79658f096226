"""Learning evidence on a known reference: PPO on Gymnasium CartPole-v1.

CleanRL's PPO (4 envs × 128 steps, 4 minibatches, 4 epochs, lr 2.5e-4 annealed, 64×64 tanh)
reaches a mean return in the 475–500 range within 500k steps; this runs the same settings through
``learner.gym_loop.train_gym``. The baseline, measured in the same run, is the random policy's
mean return; the ratio is trained / random.

    python bench/learn_cartpole.py            # 500k steps
    python bench/learn_cartpole.py --quick    # 60k steps, well under a minute
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

    result = train_gym("CartPole-v1", cfg, total, num_envs, num_steps, seed=args.seed, progress_fn=progress)
    final = result.mean_return(20)
    # First env step at which the mean of the last 20 completed episodes reached 475.
    reached = next((step for i, step in enumerate(result.episode_end_steps)
                    if i >= 19 and np.mean(result.episode_returns[i - 19:i + 1]) >= 475), -1)
    print(f"RESULT env=CartPole-v1 env_steps={result.env_steps} mean_return_last20={final:.1f} "
          f"random_return={baseline:.1f} ratio_vs_random={final / baseline:.2f} steps_to_475={reached} "
          f"wall_s={result.wall_s:.1f} device=cpu threads={args.threads}")


if __name__ == "__main__":
    main()
