"""A uniformly random policy on ``Midrange-v0``: its win rate against the default opponent.

An env is only a measuring stick if doing nothing sensible loses. Red samples every action
uniformly (``action_space.sample()``: rudder, throttle and fire each uniform over their choices)
in ``gymnasium.make_vec("Midrange-v0", num_envs=N, vectorization_mode="vector_entry_point")``;
each of the N environments plays exactly one episode from its own random start (counting only
the first episode of each, so quick endings are not over-represented). Wins, losses and draws
are red's, with a 95% Wilson interval on the win rate.

    python bench/random_policy.py                          # default opponent and pursuit, 1000 episodes each
    python bench/random_policy.py --opponents default --episodes 200
    python bench/random_policy.py --quick                  # 100 episodes each

The last line is ``RESULT default_opponent=crank win_default=... win_default_ci95=[lo,hi]
win_<opponent>=... ...``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sim  # noqa: F401  (registers Midrange-v0)
from pipeline.envs.midrange import DEFAULT_OPPONENT
from pipeline.evaluation.intervals import wilson_interval
from sim.kernels import END_REASONS


def play(opponent: str, episodes: int, seed: int) -> dict[str, Any]:
    """One episode in each of ``episodes`` environments; red's outcome counts."""
    kwargs = {} if opponent == "default" else {"opponent": opponent}
    env = gymnasium.make_vec("Midrange-v0", num_envs=episodes, vectorization_mode="vector_entry_point", **kwargs)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    finished = np.zeros(episodes, dtype=bool)
    winner = np.full(episodes, -1)
    reason = np.zeros(episodes, dtype=np.int64)
    steps = 0
    start = time.perf_counter()
    while not finished.all():
        _obs, _rew, term, trunc, info = env.step(env.action_space.sample())
        steps += 1
        new = (term | trunc) & ~finished
        winner[new] = info["winner"][new]
        reason[new] = info["end_reason"][new]
        finished |= new
    wall_s = time.perf_counter() - start
    wins, losses, draws = (int((winner == w).sum()) for w in (0, 1, 2))
    lo, hi = wilson_interval(wins, episodes)
    name = type(env.unwrapped.opponent).__name__  # type: ignore[attr-defined]
    env.close()
    return {"opponent": opponent, "built": name, "episodes": episodes, "wins": wins, "losses": losses,
            "draws": draws, "win": wins / episodes, "win_lo": lo, "win_hi": hi, "steps": steps,
            "wall_s": wall_s, "reasons": Counter(END_REASONS[int(r)] for r in reason)}


def main() -> None:
    """Play every opponent asked for and print one RESULT line each."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--opponents", default="default,pursuit",
                   help="comma-separated opponent specs; 'default' passes none (Midrange-v0's own)")
    p.add_argument("--episodes", type=int, default=1000, help="episodes per opponent (one per env)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--quick", action="store_true", help="100 episodes per opponent")
    args = p.parse_args()
    episodes = 100 if args.quick else args.episodes
    torch.set_num_threads(args.threads)
    print(f"Midrange-v0 default opponent: {DEFAULT_OPPONENT}; red: uniformly random actions; "
          f"{episodes} episodes each, one per env")
    result = [f"default_opponent={DEFAULT_OPPONENT}", f"episodes={episodes}"]
    for opponent in args.opponents.split(","):
        r = play(opponent.strip(), episodes, args.seed)
        label = f"default ({DEFAULT_OPPONENT})" if r["opponent"] == "default" else r["opponent"]
        reasons = " ".join(f"{k}:{v}" for k, v in sorted(r["reasons"].items()))
        print(f"  {label:<16} {r['built']:<13} win {r['win']:.3f} [{r['win_lo']:.3f}, {r['win_hi']:.3f}]  "
              f"wins {r['wins']}, losses {r['losses']}, draws {r['draws']}; end reasons {reasons}; "
              f"{r['steps']} decision steps, {r['wall_s']:.1f} s")
        key = r["opponent"].replace(":", "_").replace("/", "_")
        result += [f"win_{key}={r['win']:.3f}", f"win_{key}_ci95=[{r['win_lo']:.3f},{r['win_hi']:.3f}]"]
    print("RESULT " + " ".join(result))


if __name__ == "__main__":
    main()
