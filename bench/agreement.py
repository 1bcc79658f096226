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
from pipeline.evaluation.matches import play_first_episodes
from sim import BatchedSim

COMPONENTS = ("rudder", "throttle", "fire")
"""The discrete action's components, in the order of its columns."""


class Compared(BaseAgent):
    """Flies ``flyer`` and, at each of its decisions in an episode not yet over, counts where
    ``judged``'s and ``taught``'s actions at the same observation agree: ``same`` per action
    component, ``every`` in all of them, ``decisions`` counted. An episode is over once a reset
    after the first has named its environment."""

    def __init__(self, flyer: BaseAgent, judged: BaseAgent, taught: BaseAgent):
        super().__init__(flyer.num_envs, flyer.device, flyer.action_mode)
        self.flyers = (flyer, judged, taught)
        self.finished: torch.Tensor | None = None
        self.same: torch.Tensor | int = 0
        self.every = self.decisions = 0

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        flyer, judged, taught = self.flyers
        assert self.finished is not None, "reset before the first decision"
        match = (judged.act(obs) == taught.act(obs))[~self.finished]
        self.same = self.same + match.sum(0)
        self.every += int(match.all(dim=1).sum())
        self.decisions += match.shape[0]
        return flyer.act(obs)

    def reset(self, env_mask: torch.Tensor) -> None:
        for a in self.flyers:
            a.reset(env_mask)
        self.finished = torch.zeros_like(env_mask) if self.finished is None else self.finished | env_mask


def agreement(agent: str, teacher: str, opponent: str, starts: int, seed: int) -> tuple[torch.Tensor, int, int]:
    """Over ``starts`` random starts flown from both sides to the end of their first episodes:
    the decisions where the agent's and the teacher's most likely actions agree, per action
    component ``[A]``; those where every component agrees; and the decisions counted."""
    config = trained_sim_config([agent, teacher, opponent])
    same: torch.Tensor | int = 0
    every = decisions = 0
    for agent_side in (0, 1):
        sim = BatchedSim(starts, config, device="cpu", seed=seed)

        def built(spec: str, side: int, deterministic: bool, sim: BatchedSim = sim) -> BaseAgent:
            return build_agent(spec, starts, sim.layout, "cpu", seed=seed * 2 + side, action_mode=config.action_mode,
                               sim_config=config, deterministic=deterministic).eval()

        compared = Compared(built(agent, agent_side, False), built(agent, agent_side, True),
                            built(teacher, agent_side, True))
        enemy = built(opponent, 1 - agent_side, False)
        torch.manual_seed(seed * 100_003 + agent_side)
        with torch.no_grad():
            play_first_episodes(sim, *((compared, enemy) if agent_side == 0 else (enemy, compared)))
        same, every, decisions = same + compared.same, every + compared.every, decisions + compared.decisions
    assert isinstance(same, torch.Tensor)
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
