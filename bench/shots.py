"""How a fighter's fights are won and lost: who fires first, from how far, and how each ends.

An exploiter that beats a fighter has found something; this says what. It plays ``--agent``
against each opponent from random starts, each start once with the agent as red and once as
blue, and records every launch (a side's missile count falling during a decision) with the
range between the fighters at the decision before it, which side fired first in each fight,
and each fight's winner and end (a kill, out of the arena, the time limit, ...). A launch made
within ``REPLY_S`` seconds after one of the enemy's (in an earlier decision) is a *reply*: a
fighter that answers every shot with one of its own empties its rack against an enemy that
fires from afar.

    python bench/shots.py --agent RUN/exploiters/final/exploiter0 --opponents RUN/checkpoints/latest.pt
    python bench/shots.py --agent ace --opponents 'tactic:bluff?train,crank' --starts 200
    python bench/shots.py --agent random --quick

The last line is ``RESULT episodes=... won=... lost=... won_out_of_arena=...
lost_out_of_arena=... agent_first=... agent_launches=... opponent_launches=...
agent_range_km_median=... opponent_range_km_median=... agent_replies=...`` summed over the
opponents (launches: per fight; ``agent_first``: fights in which the agent fired first;
``agent_replies``: the fraction of the agent's launches that were replies).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fights import parse_fight_args, play_both_sides
from sim import SimConfig, SimState
from sim.kernels import END_REASONS, DecisionAccumulators

REPLY_S = 10.0
"""A launch this soon after one of the enemy's is counted as a reply to it."""


@dataclass
class ShotLog:
    """The launches and ends of the first episodes of one match; index 0 the agent, 1 the
    opponent."""

    episodes: int = 0
    won: Counter = field(default_factory=Counter)
    lost: Counter = field(default_factory=Counter)
    drawn: Counter = field(default_factory=Counter)
    first: list[int] = field(default_factory=lambda: [0, 0])
    launches: list[int] = field(default_factory=lambda: [0, 0])
    range_km: list[list[float]] = field(default_factory=lambda: [[], []])
    replies: list[int] = field(default_factory=lambda: [0, 0])

    def add(self, other: ShotLog) -> None:
        self.episodes += other.episodes
        for mine, theirs in ((self.won, other.won), (self.lost, other.lost), (self.drawn, other.drawn)):
            mine.update(theirs)
        for k in (0, 1):
            self.first[k] += other.first[k]
            self.launches[k] += other.launches[k]
            self.replies[k] += other.replies[k]
            self.range_km[k].extend(other.range_km[k])


class ShotWatcher:
    """A :class:`sim.batched.SimObserver` that logs each launch of each environment's first
    episode with the range at the decision before it, which side fired first, and which
    launches were replies (:data:`REPLY_S`; the time read from the physics step count, with
    ``dt_s`` the sim's physics step)."""

    def __init__(self, log: ShotLog, agent_side: int, dt_s: float = SimConfig.dt_s):
        self.log, self.side = log, agent_side
        self.finished: torch.Tensor | None = None
        self.fired = torch.zeros(0, dtype=torch.bool)
        self.reply_steps = REPLY_S / dt_s
        self.last_launch = torch.zeros(2, 0, dtype=torch.int64)  # physics step of each side's last launch

    def _keep(self, state: SimState) -> None:
        self.ammo = state.f_ammo.clone()
        self.range_km = torch.hypot(state.f_px[0] - state.f_px[1], state.f_py[0] - state.f_py[1]) / 1000.0

    def episodes_started(self, state: SimState, mask: torch.Tensor) -> None:
        if self.finished is None:  # the reset before the first decision
            self.finished = torch.zeros_like(mask)
            self.fired = torch.zeros_like(mask)
            self.last_launch = torch.full((2, mask.numel()), -(2**62), dtype=torch.int64)
            self._keep(state)

    def decision_end(self, state: SimState, acc: DecisionAccumulators) -> None:
        assert self.finished is not None
        live = ~self.finished
        now = state.physics_steps.to(torch.int64)
        counts = [(self.ammo[s] - state.f_ammo[s]).clamp_min(0) * live for s in (0, 1)]
        for sim_side in (0, 1):
            who = 0 if sim_side == self.side else 1
            count = counts[sim_side]
            self.log.launches[who] += int(count.sum())
            # Against the enemy's launches of earlier decisions only: one made in this decision
            # could not have been seen.
            replying = (now - self.last_launch[1 - sim_side]) <= self.reply_steps
            self.log.replies[who] += int((count * replying).sum())
            for i in torch.nonzero(count).flatten().tolist():
                self.log.range_km[who] += [float(self.range_km[i])] * int(count[i])
            first = (count > 0) & ~self.fired
            # Both sides firing in the same decision counts for the agent's side first.
            self.log.first[who] += int(first.sum())
            self.fired |= first
        for sim_side in (0, 1):
            self.last_launch[sim_side] = torch.where(counts[sim_side] > 0, now, self.last_launch[sim_side])
        self.finished |= acc.done
        self._keep(state)


def play(agent: str, opponent: str, starts: int, seed: int) -> ShotLog:
    """``starts`` random starts, each played with the agent as red and as blue."""
    log = ShotLog()
    for agent_side, winner, reason in play_both_sides(agent, opponent, starts, seed,
                                                      lambda side: ShotWatcher(log, side)):
        for w, r in zip(winner.tolist(), reason.tolist(), strict=True):
            end = END_REASONS[r]
            (log.won if w == agent_side else log.lost if w == 1 - agent_side else log.drawn)[end] += 1
        log.episodes += starts
    return log


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ends(counts: Counter) -> str:
    total = sum(counts.values())
    return f"{total}" + (f" ({', '.join(f'{k} {v}' for k, v in counts.most_common())})" if total else "")


def report(opponent: str, log: ShotLog) -> str:
    n = max(log.episodes, 1)
    lines = [f"{opponent}: {log.episodes} episodes, won {_ends(log.won)}, lost {_ends(log.lost)}, "
             f"drawn {_ends(log.drawn)}",
             f"  fired first: agent {log.first[0]}, opponent {log.first[1]}; launches per fight: "
             f"agent {log.launches[0] / n:.2f}, opponent {log.launches[1] / n:.2f}; replies (within "
             f"{REPLY_S:g} s of the other's launch): agent {log.replies[0]}, opponent {log.replies[1]}"]
    for k, who in enumerate(("agent", "opponent")):
        r = sorted(log.range_km[k])
        if r:
            lines.append(f"  {who}'s launch range: p10 {r[len(r) // 10]:.1f} km, median {median(r):.1f} km, "
                         f"p90 {r[(9 * len(r)) // 10]:.1f} km")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, float]:
    args, opponents = parse_fight_args(__doc__, argv, opponents="crank", starts=100, seed=7)
    total = ShotLog()
    t0 = time.perf_counter()
    for opponent in opponents:
        log = play(args.agent, opponent, args.starts, args.seed)
        print(report(opponent, log), flush=True)
        total.add(log)
    n = max(total.episodes, 1)
    result = {
        "episodes": total.episodes, "won": sum(total.won.values()), "lost": sum(total.lost.values()),
        "won_out_of_arena": total.won["out_of_arena"], "lost_out_of_arena": total.lost["out_of_arena"],
        "agent_first": total.first[0], "agent_launches": round(total.launches[0] / n, 2),
        "opponent_launches": round(total.launches[1] / n, 2),
        "agent_range_km_median": round(median(total.range_km[0]), 1),
        "opponent_range_km_median": round(median(total.range_km[1]), 1),
        "agent_replies": round(total.replies[0] / max(total.launches[0], 1), 3),
    }
    print(f"{time.perf_counter() - t0:.1f} s")
    print("RESULT " + " ".join(f"{k}={v}" for k, v in result.items()))
    return result


if __name__ == "__main__":
    main()
