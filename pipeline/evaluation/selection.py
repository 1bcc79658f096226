"""Picking one of a run's checkpoints by how it does against the opponents it trained against.

A league's last iterates keep moving around what they chase: checkpoints a minute apart can
differ by tens of points against one tactic. Which of them to keep is a validation question,
answered here the way a held-out set is kept clean: every candidate plays the run's own
training opponents (its league anchors, by default), never a held-out tactic
(:func:`agents.tactics.split.meets_heldout` refuses them), and the candidate with the highest
*worst* win rate over those opponents is picked (the highest mean breaks ties): the policy with
the fewest holes among what it was taught, judged afterwards on what it never met.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from agents.base import BaseAgent
from agents.grouped import GroupedOpponent
from agents.tactics.split import meets_heldout
from learner.checkpoint import read_checkpoint
from pipeline.config.files import load_toml
from pipeline.config.specs import build_agent
from pipeline.evaluation.entrants import trained_sim_config
from pipeline.evaluation.matches import play_first_episodes
from sim.batched import BatchedSim


@dataclass
class Candidate:
    """One checkpoint's validation: its win rate against each opponent."""

    path: Path
    agent_steps: int | None
    win_rates: dict[str, float] = field(default_factory=dict)

    @property
    def worst(self) -> float:
        return min(self.win_rates.values())

    @property
    def mean(self) -> float:
        return sum(self.win_rates.values()) / len(self.win_rates)

    @property
    def weakest(self) -> str:
        """The opponent it does worst against."""
        return min(self.win_rates, key=lambda o: self.win_rates[o])


def check_validation_opponents(opponents: Sequence[str]) -> list[str]:
    """``opponents`` stripped, without repeats; ``ValueError`` for none, or for one that could
    show the candidates a held-out tactic."""
    out = list(dict.fromkeys(o.strip() for o in opponents if o.strip()))
    if not out:
        raise ValueError("no validation opponents: give at least one")
    held = [o for o in out if meets_heldout(o)]
    if held:
        raise ValueError(f"validation opponent {held[0]!r} could show the candidates a held-out tactic or "
                         "parameter: selection may use training opponents only (scripted agents, "
                         "checkpoints, tactic:NAME?train of a training tactic)")
    return out


def run_anchors(run_dir: str | Path) -> list[str]:
    """The league anchors a run trained against (its ``config.toml``), as validation opponents."""
    path = Path(run_dir) / "config.toml"
    if not path.is_file():
        raise ValueError(f"{run_dir} has no config.toml: give the validation opponents with --opponents")
    anchors = ((load_toml(path).get("league") or {}).get("anchors")) or []
    if not isinstance(anchors, list) or not anchors:
        raise ValueError(f"{path} names no league anchors: give the validation opponents with --opponents")
    return [str(a) for a in anchors]


def _built(spec: str, sim: BatchedSim, seed: int, num_envs: int | None = None) -> BaseAgent:
    """The agent ``spec`` names for ``num_envs`` (default: all) of ``sim``'s environments, in
    evaluation mode."""
    config = sim.config
    return build_agent(spec, sim.num_envs if num_envs is None else num_envs, sim.layout, sim.device,
                       seed=seed, action_mode=config.action_mode, sim_config=config).eval()


def validate(paths: Sequence[str | Path], opponents: Sequence[str], episodes: int, seed: int = 0,
             device: str = "cpu") -> list[Candidate]:
    """Every checkpoint at ``paths`` against every one of ``opponents`` (checked with
    :func:`check_validation_opponents`), ``episodes`` episodes each (rounded up to even), on the
    simulator it was trained on.

    All the opponents play in one batch (:class:`agents.grouped.GroupedOpponent`, a group of
    environments each), once with the candidate as red and once as blue from the same seeded
    starts, and every candidate meets the same starts, opponents' draws and sampling seeds: the
    candidates differ only by what they do."""
    opponents = check_validation_opponents(opponents)
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if not paths:
        raise ValueError("no checkpoints to choose from")
    starts = (episodes + 1) // 2
    out = []
    for path in paths:
        extra = read_checkpoint(path).get("extra") or {}
        steps = extra.get("agent_steps")
        candidate = Candidate(Path(path), steps if isinstance(steps, int) and not isinstance(steps, bool) else None)
        config = trained_sim_config([str(path)])
        wins = torch.zeros(len(opponents), dtype=torch.int64)
        for side in (0, 1):
            sim = BatchedSim(starts * len(opponents), config, device=device, seed=seed * 100_003)
            policy = _built(str(path), sim, seed * 2 + side)
            grouped = GroupedOpponent([{"opponent": _built(o, sim, seed * 2 + 1 - side + 2 * g, starts)}
                                       for g, o in enumerate(opponents)])
            cuda = [sim.device] if sim.device.type == "cuda" else []
            with torch.random.fork_rng(devices=cuda):
                torch.manual_seed(seed * 100_003 + side)
                red, blue = (policy, grouped) if side == 0 else (grouped, policy)
                winner = play_first_episodes(sim, red, blue)["winner"]
            wins += (winner == side).view(len(opponents), starts).sum(1)
        candidate.win_rates = {o: int(wins[g]) / (2 * starts) for g, o in enumerate(opponents)}
        out.append(candidate)
    return out


def pick(candidates: Sequence[Candidate]) -> Candidate:
    """The candidate with the highest worst win rate, the highest mean among equals, the newest
    among those."""
    if not candidates:
        raise ValueError("no candidates to pick from")
    best = max(range(len(candidates)), key=lambda i: (candidates[i].worst, candidates[i].mean, i))
    return candidates[best]
