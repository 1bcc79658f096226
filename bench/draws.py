"""Why a fighter's fights end without a winner: the state one decision before each draw.

A draw (time limit, both sides out of missiles, mutual kill) says nothing about why the fighter
did not win. This plays ``--agent`` against each opponent from random starts, each start once
with the agent as red and once as blue, and for every episode that ends in a draw records, from
the state one decision before its end: the missiles each side has left, the missiles in flight
and the range. A draw at the time limit against a disarmed enemy with missiles left on board is
a fighter that did not go after an enemy that could no longer hurt it.

    python bench/draws.py --agent runs/default --opponents random,crank
    python bench/draws.py --agent RUN/checkpoints/latest.pt --opponents random --starts 1000
    python bench/draws.py --agent random --quick

The last line is ``RESULT episodes=... draws=... time_limit=... enemy_disarmed=...
agent_armed=... range_km_median=...`` summed over the opponents (``enemy_disarmed``: draws
with the enemy's missiles all gone and none in flight; ``agent_armed``: draws with the agent
still holding at least one missile).
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
from sim import SimState
from sim.kernels import END_REASONS, DecisionAccumulators

DRAW = 2
"""``StepOutput.winner`` of a drawn episode."""


@dataclass
class DrawLog:
    """The drawn episodes of one match, one entry per draw."""

    episodes: int = 0
    wins: int = 0
    losses: int = 0
    reasons: Counter = field(default_factory=Counter)
    own_left: list[int] = field(default_factory=list)
    enemy_left: list[int] = field(default_factory=list)
    enemy_in_flight: list[int] = field(default_factory=list)
    range_km: list[float] = field(default_factory=list)

    @property
    def draws(self) -> int:
        return len(self.range_km)

    def disarmed(self) -> int:
        return sum(1 for a, f in zip(self.enemy_left, self.enemy_in_flight, strict=True) if a == 0 and f == 0)

    def armed(self) -> int:
        return sum(1 for a in self.own_left if a > 0)


class DrawWatcher:
    """A :class:`sim.batched.SimObserver` that logs, for each environment's first episode that
    ends in a draw, the state one decision before that end (kept from the previous decision)."""

    def __init__(self, log: DrawLog, agent_side: int):
        self.log, self.side, self.enemy = log, agent_side, 1 - agent_side
        self.finished: torch.Tensor | None = None

    def _keep(self, state: SimState) -> None:
        self.ammo = state.f_ammo.clone()
        self.in_flight = state.m_active.sum(dim=1)
        self.range_km = torch.hypot(state.f_px[0] - state.f_px[1], state.f_py[0] - state.f_py[1]) / 1000.0

    def episodes_started(self, state: SimState, mask: torch.Tensor) -> None:
        if self.finished is None:  # the reset before the first decision
            self.finished = torch.zeros_like(mask)
            self._keep(state)

    def decision_end(self, state: SimState, acc: DecisionAccumulators) -> None:
        assert self.finished is not None
        drawn = acc.done & ~self.finished & (acc.winner == DRAW)
        for i in torch.nonzero(drawn).flatten().tolist():
            self.log.reasons[END_REASONS[int(acc.end_reason[i])]] += 1
            self.log.own_left.append(int(self.ammo[self.side, i]))
            self.log.enemy_left.append(int(self.ammo[self.enemy, i]))
            self.log.enemy_in_flight.append(int(self.in_flight[self.enemy, i]))
            self.log.range_km.append(float(self.range_km[i]))
        self.finished |= acc.done
        self._keep(state)


def play(agent: str, opponent: str, starts: int, seed: int) -> DrawLog:
    """``starts`` random starts, each played with the agent as red and as blue."""
    log = DrawLog()
    for agent_side, winner, _ in play_both_sides(agent, opponent, starts, seed, lambda side: DrawWatcher(log, side)):
        log.wins += int((winner == agent_side).sum())
        log.losses += int((winner == 1 - agent_side).sum())
        log.episodes += starts
    return log


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(opponent: str, log: DrawLog) -> str:
    lines = [f"{opponent}: {log.episodes} episodes, {log.wins} won, {log.losses} lost, {log.draws} drawn"
             + (f" ({', '.join(f'{k} {v}' for k, v in sorted(log.reasons.items()))})" if log.draws else "")]
    if log.draws:
        pairs = Counter(zip(log.own_left, log.enemy_left, strict=True))
        lines.append("  missiles left at the last decision (agent, enemy): "
                     + ", ".join(f"({a}, {e}) ×{n}" for (a, e), n in sorted(pairs.items(), key=lambda kv: -kv[1])))
        r = sorted(log.range_km)
        lines.append(f"  range: min {r[0]:.1f} km, median {median(r):.1f} km, max {r[-1]:.1f} km")
        lines.append(f"  enemy disarmed (none left, none in flight): {log.disarmed()} of {log.draws}; "
                     f"agent still armed: {log.armed()} of {log.draws}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, float]:
    args, opponents = parse_fight_args(__doc__, argv, opponents="random,crank", starts=500, seed=1234)
    total = DrawLog()
    t0 = time.perf_counter()
    for opponent in opponents:
        log = play(args.agent, opponent, args.starts, args.seed)
        print(report(opponent, log), flush=True)
        total.episodes += log.episodes
        total.reasons.update(log.reasons)
        for name in ("own_left", "enemy_left", "enemy_in_flight", "range_km"):
            getattr(total, name).extend(getattr(log, name))
    result = {
        "episodes": total.episodes, "draws": total.draws, "time_limit": total.reasons["time_limit"],
        "enemy_disarmed": total.disarmed(), "agent_armed": total.armed(),
        "range_km_median": round(median(total.range_km), 1),
    }
    print(f"{time.perf_counter() - t0:.1f} s")
    print("RESULT " + " ".join(f"{k}={v}" for k, v in result.items()))
    return result


if __name__ == "__main__":
    main()
