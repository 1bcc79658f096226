"""How often a fighter picks its teacher's action, in fights against each opponent.

A kickstarting teacher (``ppo.teacher``) is asked at the observations of the training fights
only. This flies ``--agent`` against each opponent from seeded random starts, each start once
with the agent as red and once as blue, to the end of the first episode, and at every decision
of those fights compares the agent's most likely action with ``--teacher``'s at the same
observation, component by component (rudder, throttle, fire in the discrete mode). The agent
flies as in ``pipeline.evaluate`` (its actions drawn); both answers compared are the most likely.
Against an opponent the training met, the agreement says how much of the teacher the agent
took; against a held-out one, how much of it carries to fights the teacher was never asked about.

    python bench/agreement.py --agent RUN --teacher ace3 --opponents crank,tactic:pump?train,tactic:skate?heldout
    python bench/agreement.py --agent ace2 --teacher ace --quick

The last line is ``RESULT`` with ``OPPONENT=ALL`` per opponent, the share of decisions where all
components agree, and ``decisions=...`` in all.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.base import BaseAgent
from bench.fights import parse_fight_args
from core.command import run_command
from pipeline.config.specs import build_agent
from pipeline.evaluation.entrants import trained_sim_config
from sim import BatchedSim

COMPONENTS = ("rudder", "throttle", "fire")
"""The discrete action's components, in the order of its columns."""


def agreement(agent: str, teacher: str, opponent: str, starts: int, seed: int) -> tuple[torch.Tensor, int, int]:
    """Over ``starts`` random starts flown from both sides to the end of their first episodes:
    the decisions where the agent's and the teacher's most likely actions agree, per action
    component ``[A]``; those where every component agrees; and the decisions counted."""
    config = trained_sim_config([agent, teacher, opponent])
    same = torch.zeros(0, dtype=torch.int64)
    every = decisions = 0
    for agent_side in (0, 1):
        sim = BatchedSim(starts, config, device="cpu", seed=seed)

        def built(spec: str, side: int, deterministic: bool, sim: BatchedSim = sim) -> BaseAgent:
            return build_agent(spec, starts, sim.layout, "cpu", seed=seed * 2 + side, action_mode=config.action_mode,
                               sim_config=config, deterministic=deterministic).eval()

        flyer, enemy = built(agent, agent_side, False), built(opponent, 1 - agent_side, False)
        judged, taught = built(agent, agent_side, True), built(teacher, agent_side, True)
        flyers = (flyer, enemy, judged, taught)
        torch.manual_seed(seed * 100_003 + agent_side)
        finished = torch.zeros(starts, dtype=torch.bool)
        obs = sim.reset()
        for a in flyers:
            a.reset(torch.ones(starts, dtype=torch.bool))
        with torch.no_grad():
            for _ in range(config.max_decisions + 1):
                own = obs[:, agent_side]
                match = (judged.act(own) == taught.act(own))[~finished]
                same = match.sum(0) if same.numel() == 0 else same + match.sum(0)
                every += int(match.all(dim=1).sum())
                decisions += match.shape[0]
                acts = [flyer.act(own), enemy.act(obs[:, 1 - agent_side])]
                out = sim.step(torch.stack(acts if agent_side == 0 else acts[::-1], dim=1))
                finished |= out.done
                for a in flyers:
                    a.reset(out.done)
                obs = out.obs
                if bool(finished.all()):
                    break
        sim.check_errors()
    return same, every, decisions


def main(argv: list[str] | None = None) -> dict[str, float]:
    args, opponents = parse_fight_args(__doc__, argv, opponents="crank,random", starts=200, seed=1000,
                                       teacher=True)
    result: dict[str, float] = {}
    total = 0
    t0 = time.perf_counter()
    for opponent in opponents:
        same, every, n = agreement(args.agent, args.teacher, opponent, args.starts, args.seed)
        names = COMPONENTS if same.numel() == len(COMPONENTS) else [f"a{i}" for i in range(same.numel())]
        parts = ", ".join(f"{name} {100 * k / n:.1f} %" for name, k in zip(names, same.tolist(), strict=True))
        print(f"{opponent}: {n} decisions; the teacher's action taken: {parts}; all {100 * every / n:.1f} %",
              flush=True)
        result[opponent] = round(every / n, 4)
        total += n
    print(f"{time.perf_counter() - t0:.1f} s")
    result["decisions"] = total
    print("RESULT " + " ".join(f"{k}={v}" for k, v in result.items()))
    return result


if __name__ == "__main__":
    run_command(main, sys.argv[1:])  # a spec that builds no agent: one line, exit 2
