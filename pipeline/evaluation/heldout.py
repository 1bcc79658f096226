"""How a fighter does against tactics it never met: the held-out tactics of
:data:`agents.tactics.HELDOUT`, each with its parameters drawn per episode from its held-out
ranges (``bench/learn_league.py`` reports the lowest win rate as ``win_heldout_min``)."""

from __future__ import annotations

from agents.tactics import HELDOUT
from pipeline.evaluation.entrants import trained_sim_config
from pipeline.evaluation.matches import MatchStats, play_match


def heldout_matches(agent: str, episodes: int, seed: int, device: str = "cpu") -> dict[str, MatchStats]:
    """``agent`` against every held-out tactic, ``episodes`` per tactic (each seeded start from
    both sides), on the simulator the agent was trained on (the default one for a scripted
    agent)."""
    config = trained_sim_config([agent])
    return {spec: play_match(agent, spec, episodes, config, seed=seed + i, device=device,
                             batch=min(episodes, 1024))
            for i, spec in enumerate(HELDOUT)}


def heldout_line(matches: dict[str, MatchStats]) -> tuple[float, str]:
    """The lowest win rate over the held-out tactics, and one line with each tactic's win, draw
    and loss rates (``held-out win/draw/loss: notch 0.912/0.080/0.008 sniper ...``): a fight
    drawn at the time limit and a fight lost are different failures."""
    shown = " ".join(f"{spec.removeprefix('tactic:').removesuffix('?heldout')} "
                     + "/".join(f"{r:.3f}" for r in m.rates) for spec, m in matches.items())
    return min(m.rates[0] for m in matches.values()), f"held-out win/draw/loss: {shown}"
