"""What the fight-analysis scripts share (``bench/draws.py``, ``bench/shots.py``): their command
line, and playing an agent against an opponent from seeded random starts, each start once with
the agent as red and once as blue, with a :class:`sim.batched.SimObserver` watching."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

import torch

from pipeline.config.specs import build_agent
from pipeline.evaluation.entrants import trained_sim_config
from pipeline.evaluation.matches import play_first_episodes
from sim import BatchedSim
from sim.batched import SimObserver


def parse_fight_args(doc: str, argv: list[str] | None, opponents: str, starts: int,
                     seed: int, teacher: bool = False) -> tuple[argparse.Namespace, list[str]]:
    """``--agent``, ``--opponents``, ``--starts``, ``--seed`` and ``--quick`` (32 starts), with
    the given defaults, and with ``teacher`` a required ``--teacher``; the parsed arguments and
    the opponents as a list. A bad value exits with argparse's usage error (status 2)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--agent", required=True, help="checkpoint, run directory, scripted name or module:Class")
    if teacher:
        parser.add_argument("--teacher", required=True, help="the agent whose most likely actions are compared")
    parser.add_argument("--opponents", default=opponents, help="comma-separated opponents")
    parser.add_argument("--starts", type=int, default=starts,
                        help="random starts per opponent (each played from both sides)")
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--quick", action="store_true", help="32 starts per opponent")
    args = parser.parse_args(argv)
    if args.quick:
        args.starts = 32
    if args.starts < 1:
        parser.error(f"--starts must be >= 1, got {args.starts}")
    names = [o.strip() for o in args.opponents.split(",") if o.strip()]
    if not names:
        parser.error("--opponents names no opponent")
    return args, names


def play_both_sides(agent: str, opponent: str, starts: int, seed: int,
                    observer_for: Callable[[int], SimObserver]) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """For the agent as red (side 0), then as blue (side 1): ``starts`` seeded random starts
    played to the end of their first episodes with ``observer_for(agent_side)`` watching;
    yields ``(agent_side, winner, end_reason)``, CPU tensors ``[starts]``."""
    config = trained_sim_config([agent, opponent])
    for agent_side in (0, 1):
        sim = BatchedSim(starts, config, device="cpu", seed=seed)
        sim.observer = observer_for(agent_side)
        specs = (agent, opponent) if agent_side == 0 else (opponent, agent)
        flyers = [build_agent(s, starts, sim.layout, "cpu", seed=seed * 2 + side,
                             action_mode=config.action_mode, sim_config=config).eval()
                  for side, s in enumerate(specs)]
        torch.manual_seed(seed * 100_003 + agent_side)
        with torch.no_grad():
            out = play_first_episodes(sim, flyers[0], flyers[1])
        yield agent_side, out["winner"], out["end_reason"]
