"""Learning evidence in our simulator: PPO flies red against the ``straight`` opponent.

Blue flies straight at full throttle and never fires (constant discrete action ``(1, 2, 0)``);
the learner flies red from ``obs[:, 0]`` with the ``shaped`` reward (the sim's outcome +1 win,
−1 loss, 0 draw, plus small aim and closing terms and a cost per launch, here 0.05) or the
outcome alone (``--reward outcome``). The baseline, measured in the same run, is a uniformly
random red policy on the same scenario; ratios are trained / random.

Scenarios:
- ``default``: the sim's default duel (25–45 km apart, 300 s limit).
- ``long``: 60–80 km apart and a 150 s limit. Missiles fired at the start fall short, and blue
  does not leave the arena before the limit, so winning needs holding fire until in range.

    python bench/learn_straight.py                      # long scenario, shaped reward, 8 min
    python bench/learn_straight.py --scenario default --reward outcome
    python bench/learn_straight.py --quick              # under a minute
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.schema import RolloutSpec
from learner import ActionSpec, PPOConfig, PPOLearner, RolloutBatch
from rewards import make_reward
from rewards.base import step_info
from rewards.presets import ShapedConfig, ShapedReward
from sim import BatchedSim, SimConfig

BLUE_STRAIGHT = (1, 2, 0)  # rudder 0, full throttle, never fire


def make_sim_config(scenario: str) -> SimConfig:
    """The SimConfig of a named scenario."""
    if scenario == "default":
        return SimConfig()
    if scenario == "long":
        return SimConfig(spawn_separation_m=(60_000.0, 80_000.0), max_time_s=150.0)
    raise ValueError(f"scenario must be 'default' or 'long', got {scenario!r}")


class EpisodeLog:
    """Outcomes of the last ``window`` completed episodes from red's side."""

    def __init__(self, window: int) -> None:
        self.outcomes: deque[int] = deque(maxlen=window)  # winner codes
        self.lengths: deque[int] = deque(maxlen=window)
        self.launches: deque[int] = deque(maxlen=window)
        self.reasons: deque[int] = deque(maxlen=window)  # end-reason codes
        self.total = 0

    def add(self, winners: torch.Tensor, lengths: torch.Tensor, launches: torch.Tensor,
            reasons: torch.Tensor) -> None:
        """Record completed episodes (1-D tensors of equal length)."""
        self.reasons.extend(reasons.tolist())
        self.outcomes.extend(winners.tolist())
        self.lengths.extend(lengths.tolist())
        self.launches.extend(launches.tolist())
        self.total += len(winners)

    def rate(self, code: int) -> float:
        """Fraction of logged episodes whose winner code is ``code`` (0 red, 1 blue, 2 draw)."""
        return sum(1 for w in self.outcomes if w == code) / max(len(self.outcomes), 1)

    def kill_rate(self) -> float:
        """Fraction of logged episodes red won by a missile hit (not by blue leaving the arena)."""
        hits = sum(1 for w, r in zip(self.outcomes, self.reasons, strict=True) if w == 0 and r == 1)
        return hits / max(len(self.outcomes), 1)

    def mean_length(self) -> float:
        """Mean episode length in decision steps."""
        return sum(self.lengths) / max(len(self.lengths), 1)

    def mean_launches(self) -> float:
        """Mean red launches per episode."""
        return sum(self.launches) / max(len(self.launches), 1)


def run_random(sim_config: SimConfig, num_envs: int, episodes: int, seed: int) -> EpisodeLog:
    """Uniformly random red against straight blue until ``episodes`` episodes complete."""
    sim = BatchedSim(num_envs, sim_config, seed=seed + 10_000)
    sim.reset()
    g = torch.Generator().manual_seed(seed)
    blue = torch.tensor(BLUE_STRAIGHT).expand(num_envs, 3)
    log = EpisodeLog(episodes)
    red_launches = torch.zeros(num_envs, dtype=torch.int64)
    while log.total < episodes:
        red = torch.stack([torch.randint(0, n, (num_envs,), generator=g) for n in (3, 3, 2)], -1)
        out = sim.step(torch.stack([red, blue], 1))
        red_launches += out.launches[:, 0]
        if bool(out.done.any()):
            d = out.done
            log.add(out.winner[d], out.episode_steps[d], red_launches[d], out.end_reason[d])
            red_launches[d] = 0
    return log


def main() -> None:
    """Measure the random baseline, train, print progress and a final ``RESULT`` line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="train for 40 s instead of the budget")
    parser.add_argument("--budget-s", type=float, default=480.0, help="training wall-clock budget")
    parser.add_argument("--scenario", default="long", choices=("default", "long"))
    parser.add_argument("--reward", default="shaped", help="rewards.make_reward spec: outcome | shaped")
    parser.add_argument("--launch-cost", type=float, default=0.05,
                        help="shaped reward: cost per own launch (the preset's 0.01 learns to hold fire "
                             "too slowly; see bench/RESULTS.md); negative: the preset's own value")
    parser.add_argument("--lr", type=float, default=3e-4, help="initial learning rate (annealed to 0)")
    parser.add_argument("--envs", type=int, default=128)
    parser.add_argument("--steps", type=int, default=32, help="rollout length T per update")
    parser.add_argument("--window", type=int, default=500, help="episodes in the reported win rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    budget = 40.0 if args.quick else args.budget_s
    sim_config = make_sim_config(args.scenario)
    n, t_len = args.envs, args.steps

    t0 = time.perf_counter()
    baseline = run_random(sim_config, n, min(args.window, 300 if args.quick else 1000), args.seed)
    print(f"random red: win {baseline.rate(0):.3f} (by kill {baseline.kill_rate():.3f}) draw {baseline.rate(2):.3f} loss {baseline.rate(1):.3f} "
          f"length {baseline.mean_length():.1f} launches {baseline.mean_launches():.2f} "
          f"over {baseline.total} episodes ({time.perf_counter() - t0:.1f} s)", flush=True)

    sim = BatchedSim(n, sim_config, seed=args.seed)
    layout = sim.layout
    if args.reward == "shaped" and args.launch_cost >= 0:
        reward_fn = ShapedReward("cpu", ShapedConfig(launch_cost=args.launch_cost), layout=layout)
    else:
        reward_fn = make_reward(args.reward, "cpu", layout=layout)
    est_updates = max(int(budget / 0.5), 10)  # the schedule's length; the budget decides when to stop
    cfg = PPOConfig(hidden_sizes=(128, 128), learning_rate=args.lr, total_updates=est_updates,
                    num_minibatches=4, update_epochs=4, gamma=0.995, gae_lambda=0.95,
                    entropy_coef=0.005, seed=args.seed)
    learner = PPOLearner(cfg, sim.obs_dim, ActionSpec.for_sim(sim_config), obs_layout=layout.metadata())
    batch = RolloutBatch.of(RolloutSpec(t_len, n, sim.obs_dim, 3).allocate(),
                            torch.zeros(n, dtype=torch.int64))
    actions = torch.zeros(n, 2, 3, dtype=torch.int64)
    actions[:, 1] = torch.tensor(BLUE_STRAIGHT)
    log = EpisodeLog(args.window)
    red_launches = torch.zeros(n, dtype=torch.int64)
    obs = sim.reset()[:, 0].clone()
    start = time.perf_counter()
    update = 0
    agent_steps = 0
    print(f"{'update':>6} {'agent_steps':>11} {'episodes':>8} {'win':>6} {'kill':>6} {'draw':>6} {'loss':>6} "
          f"{'length':>7} {'launch':>6} {'entropy':>7} {'wall_s':>6}", flush=True)
    while time.perf_counter() - start < budget:
        batch.policy_versions.fill_(learner.policy_version)
        for t in range(t_len):
            act, log_prob, value = learner.policy.act(obs)
            actions[:, 0] = act
            out = sim.step(actions)
            final_red = out.final_obs[:, 0]
            info = step_info(out, 0)
            batch.obs[t] = obs
            batch.actions[t] = act
            batch.log_probs[t] = log_prob
            batch.values[t] = value
            batch.rewards[t] = reward_fn.compute(obs, final_red, act, out.done, info)
            batch.terminated[t] = out.terminated
            batch.truncated[t] = out.truncated
            batch.bootstrap_values[t] = learner.policy.get_value(final_red)
            red_launches += out.launches[:, 0]
            if bool(out.done.any()):
                done = out.done
                log.add(out.winner[done], out.episode_steps[done], red_launches[done], out.end_reason[done])
                red_launches[done] = 0
                reward_fn.reset(done)
            obs = out.obs[:, 0].clone()
        batch.next_values.copy_(learner.policy.get_value(obs))
        stats = learner.update(batch)
        update += 1
        agent_steps += t_len * n
        if update % 20 == 0:
            print(f"{update:>6} {agent_steps:>11} {log.total:>8} {log.rate(0):>6.3f} {log.kill_rate():>6.3f} {log.rate(2):>6.3f} "
                  f"{log.rate(1):>6.3f} {log.mean_length():>7.1f} {log.mean_launches():>6.2f} "
                  f"{stats['entropy']:>7.3f} {time.perf_counter() - start:>6.0f}", flush=True)
    wall = time.perf_counter() - start
    win, base_win = log.rate(0), baseline.rate(0)
    print(f"RESULT scenario={args.scenario} reward={args.reward} win_rate={win:.3f} "
          f"random_win_rate={base_win:.3f} kill_rate={log.kill_rate():.3f} "
          f"random_kill_rate={baseline.kill_rate():.3f} ratio_vs_random={win / max(base_win, 1e-9):.2f} "
          f"episodes_in_window={len(log.outcomes)} mean_length={log.mean_length():.1f} "
          f"random_mean_length={baseline.mean_length():.1f} updates={update} agent_steps={agent_steps} "
          f"train_wall_s={wall:.0f} device=cpu threads={args.threads}")


if __name__ == "__main__":
    main()
