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

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.evaluate import trained_sim_config
from pipeline.plugins import make_agent
from sim import BatchedSim
from sim.kernels import END_REASONS

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


def play(agent: str, opponent: str, starts: int, seed: int) -> DrawLog:
    """``starts`` random starts, each played with the agent as red and as blue."""
    config = trained_sim_config([agent, opponent])
    log = DrawLog()
    for agent_side in (0, 1):
        sim = BatchedSim(starts, config, device="cpu", seed=seed)
        specs = (agent, opponent) if agent_side == 0 else (opponent, agent)
        flyers = [make_agent(s, starts, sim.layout, "cpu", seed=seed * 2 + side,
                             action_mode=config.action_mode, sim_config=config).eval()
                  for side, s in enumerate(specs)]
        torch.manual_seed(seed * 100_003 + agent_side)
        obs = sim.reset()
        everyone = torch.ones(starts, dtype=torch.bool)
        for f in flyers:
            f.reset(everyone)
        finished = torch.zeros(starts, dtype=torch.bool)
        enemy = 1 - agent_side
        with torch.no_grad():
            for _ in range(config.max_decisions + 1):
                s = sim.state
                ammo = s.f_ammo.clone()
                in_flight = s.m_active.sum(dim=1)
                range_km = torch.hypot(s.f_px[0] - s.f_px[1], s.f_py[0] - s.f_py[1]) / 1000.0
                out = sim.step(torch.stack([flyers[0].act(obs[:, 0]), flyers[1].act(obs[:, 1])], dim=1))
                first = out.done & ~finished
                log.wins += int((first & (out.winner == agent_side)).sum())
                log.losses += int((first & (out.winner == enemy)).sum())
                for i in torch.nonzero(first & (out.winner == DRAW)).flatten().tolist():
                    log.reasons[END_REASONS[int(out.end_reason[i])]] += 1
                    log.own_left.append(int(ammo[agent_side, i]))
                    log.enemy_left.append(int(ammo[enemy, i]))
                    log.enemy_in_flight.append(int(in_flight[enemy, i]))
                    log.range_km.append(float(range_km[i]))
                finished |= out.done
                for f in flyers:
                    f.reset(out.done)
                obs = out.obs
                if bool(finished.all()):
                    break
        sim.check_errors()
        log.episodes += starts
    return log


def median(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agent", required=True, help="checkpoint, run directory, scripted name or module:Class")
    parser.add_argument("--opponents", default="random,crank", help="comma-separated opponents")
    parser.add_argument("--starts", type=int, default=500, help="random starts per opponent (each played from both sides)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--quick", action="store_true", help="32 starts per opponent")
    args = parser.parse_args(argv)
    if args.quick:
        args.starts = 32
    if args.starts < 1:
        parser.error(f"--starts must be >= 1, got {args.starts}")
    opponents = [o.strip() for o in args.opponents.split(",") if o.strip()]
    if not opponents:
        parser.error("--opponents names no opponent")
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
