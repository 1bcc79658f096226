"""How a fighter's fights are won and lost: who fires first, from how far, and how each ends.

An exploiter that beats a fighter has found something; this says what. It plays ``--agent``
against each opponent from random starts, each start once with the agent as red and once as
blue, and records every launch (a side's missile count falling during a decision) with the
range between the fighters at the decision before it, which side fired first in each fight,
and each fight's winner and end (a kill, out of the arena, the time limit, ...). A launch made
within ``REPLY_S`` seconds after one of the enemy's (in an earlier decision) is a *reply*: a
fighter that answers every shot with one of its own empties its rack against an enemy that
fires from afar. Each launch is also set against the shooter's no-escape reach at that decision
(the reach against the target turning away at once, :func:`sim.reach.spacetime.reach_observation`):
a launch from outside it can be outrun, and the fights a fighter draws are often the ones whose
every shot was fired from outside (bench/RESULTS.md, "Where the draws come from: shots from
outside the no-escape reach"). Those counts are given per outcome of the fight.

    python bench/shots.py --agent RUN/exploiters/final/exploiter0 --opponents RUN/checkpoints/latest.pt
    python bench/shots.py --agent ace --opponents 'tactic:bluff?train,crank' --starts 200
    python bench/shots.py --agent random --quick

The last line is ``RESULT episodes=... won=... lost=... won_out_of_arena=...
lost_out_of_arena=... agent_first=... agent_launches=... opponent_launches=...
agent_range_km_median=... opponent_range_km_median=... agent_replies=... agent_outside_nez=...
agent_outside_nez_drawn=...`` summed over the opponents (launches: per fight; ``agent_first``:
fights in which the agent fired first; ``agent_replies``: the fraction of the agent's launches
that were replies; ``agent_outside_nez``: the fraction of the agent's launches fired from outside
its no-escape reach, ``_drawn`` the same over the drawn fights only).
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
from pipeline.evaluation.entrants import trained_sim_config
from sim import SimConfig, SimState
from sim.kernels import END_REASONS, DecisionAccumulators
from sim.layout import RANGE_SCALE_M
from sim.reach.missile import cached_tables
from sim.reach.spacetime import reach_observation

REPLY_S = 10.0
"""A launch this soon after one of the enemy's is counted as a reply to it."""
OUTCOMES = ("won", "drawn", "lost")
"""The agent's outcomes, in the order :attr:`ShotLog.outside_nez` counts them."""


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
    outside_nez: list[list[int]] = field(default_factory=lambda: [[0, 0, 0], [0, 0, 0]])
    """Per side, per outcome of the fight (:data:`OUTCOMES`): launches from outside the no-escape
    reach."""
    by_outcome: list[list[int]] = field(default_factory=lambda: [[0, 0, 0], [0, 0, 0]])
    """Per side, per outcome of the fight: all launches."""

    def add(self, other: ShotLog) -> None:
        self.episodes += other.episodes
        for mine, theirs in ((self.won, other.won), (self.lost, other.lost), (self.drawn, other.drawn)):
            mine.update(theirs)
        for k in (0, 1):
            self.first[k] += other.first[k]
            self.launches[k] += other.launches[k]
            self.replies[k] += other.replies[k]
            self.range_km[k].extend(other.range_km[k])
            for j in range(len(OUTCOMES)):
                self.outside_nez[k][j] += other.outside_nez[k][j]
                self.by_outcome[k][j] += other.by_outcome[k][j]


class ShotWatcher:
    """A :class:`sim.batched.SimObserver` that logs each launch of each environment's first
    episode with the range at the decision before it, which side fired first, and which
    launches were replies (:data:`REPLY_S`; the time read from the physics step count, with
    ``dt_s`` the sim's physics step). Per environment it keeps each side's launches and how many
    of them left from outside the shooter's no-escape reach, for :meth:`settle` to count by the
    fight's outcome."""

    def __init__(self, log: ShotLog, agent_side: int, dt_s: float | None = None, config: SimConfig | None = None):
        config = config if config is not None else SimConfig()
        self.log, self.side = log, agent_side
        self.tables = cached_tables(config, "cpu", "float32")
        dt_s = dt_s if dt_s is not None else config.dt_s
        self.finished: torch.Tensor | None = None
        self.fired = torch.zeros(0, dtype=torch.bool)
        self.reply_steps = REPLY_S / dt_s
        self.last_launch = torch.zeros(2, 0, dtype=torch.int64)  # physics step of each side's last launch
        self.shots = torch.zeros(2, 0, dtype=torch.int64)  # per side and environment: launches
        self.outside = torch.zeros(2, 0, dtype=torch.int64)  # ... of them from outside the no-escape reach

    def _keep(self, state: SimState) -> None:
        self.ammo = state.f_ammo.clone()
        rx, ry = state.f_px[1] - state.f_px[0], state.f_py[1] - state.f_py[0]
        self.range_km = torch.hypot(rx, ry) / 1000.0
        nez = []
        for s, sign in ((0, 1.0), (1, -1.0)):  # each side's no-escape reach against the other
            e = 1 - s
            _, escape, _, _ = reach_observation(self.tables, (sign * rx).float(), (sign * ry).float(),
                                                state.f_vx[s].float(), state.f_vy[s].float(),
                                                state.f_vx[e].float(), state.f_vy[e].float())
            nez.append(escape.to(self.range_km.dtype) * (RANGE_SCALE_M / 1000.0))
        self.nez_km = torch.stack(nez)

    def episodes_started(self, state: SimState, mask: torch.Tensor) -> None:
        if self.finished is None:  # the reset before the first decision
            self.finished = torch.zeros_like(mask)
            self.fired = torch.zeros_like(mask)
            self.last_launch = torch.full((2, mask.numel()), -(2**62), dtype=torch.int64)
            self.shots = torch.zeros(2, mask.numel(), dtype=torch.int64)
            self.outside = torch.zeros(2, mask.numel(), dtype=torch.int64)
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
            self.shots[who] += count.to(torch.int64)
            self.outside[who] += (count * (self.range_km > self.nez_km[sim_side])).to(torch.int64)
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

    def settle(self, winner: torch.Tensor) -> None:
        """Count the launches (and those from outside the no-escape reach) by the outcome of each
        environment's fight, ``winner`` its winning side (2 a draw)."""
        outcome = torch.where(winner == self.side, 0, torch.where(winner == 1 - self.side, 2, 1))
        for who in (0, 1):
            for j in range(len(OUTCOMES)):
                mask = outcome == j
                self.log.by_outcome[who][j] += int(self.shots[who][mask].sum())
                self.log.outside_nez[who][j] += int(self.outside[who][mask].sum())


def play(agent: str, opponent: str, starts: int, seed: int) -> ShotLog:
    """``starts`` random starts, each played with the agent as red and as blue."""
    log = ShotLog()
    watchers: list[ShotWatcher] = []
    config = trained_sim_config([agent, opponent])  # the sim the fights run in: its missile tables

    def watcher(side: int) -> ShotWatcher:
        watchers.append(ShotWatcher(log, side, config=config))
        return watchers[-1]

    for agent_side, winner, reason in play_both_sides(agent, opponent, starts, seed, watcher):
        watchers[-1].settle(winner)
        for w, r in zip(winner.tolist(), reason.tolist(), strict=True):
            end = END_REASONS[r]
            (log.won if w == agent_side else log.lost if w == 1 - agent_side else log.drawn)[end] += 1
        log.episodes += starts
    return log


def outside_share(log: ShotLog, who: int, outcome: str | None = None) -> float:
    """The fraction of a side's launches (``who`` 0 the agent) fired from outside its no-escape
    reach, over every fight or those with one outcome (:data:`OUTCOMES`); nan without launches."""
    js = range(len(OUTCOMES)) if outcome is None else [OUTCOMES.index(outcome)]
    shots = sum(log.by_outcome[who][j] for j in js)
    return sum(log.outside_nez[who][j] for j in js) / shots if shots else float("nan")


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
            shares = ", ".join(f"{name} {outside_share(log, k, name):.2f} of {log.by_outcome[k][j]}"
                               for j, name in enumerate(OUTCOMES) if log.by_outcome[k][j])
            lines.append(f"  {who}'s launches from outside its no-escape reach: "
                         f"{outside_share(log, k):.2f} (by the fight's outcome: {shares})")
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
        "agent_outside_nez": round(outside_share(total, 0), 3),
        "agent_outside_nez_drawn": round(outside_share(total, 0, "drawn"), 3),
    }
    print(f"{time.perf_counter() - t0:.1f} s")
    print("RESULT " + " ".join(f"{k}={v}" for k, v in result.items()))
    return result


if __name__ == "__main__":
    main()
