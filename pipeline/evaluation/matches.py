"""Matches between two agents: every environment plays its first episode, each seeded start
from both sides, and the outcomes counted from the agent's point of view."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from agents import BaseAgent
from pipeline.config.specs import build_agent
from pipeline.evaluation.intervals import wilson_interval
from pipeline.evaluation.recording import MatchRecorder
from sim import BatchedSim, SimConfig
from sim.kernels import END_REASONS


@dataclass
class MatchStats:
    """Outcome counts of one agent against one opponent, from the agent's point of view."""

    agent: str
    opponent: str
    episodes: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    total_length_steps: int = 0
    end_reasons: dict[str, int] = field(default_factory=lambda: dict.fromkeys(END_REASONS[1:], 0))
    """Episodes by how they ended (``kill``, ``out_of_arena``, ``time_limit``, ...), both sides'."""
    won_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(END_REASONS[1:], 0))
    """The agent's wins by how they ended: ``out_of_arena`` counts the opponent flown out."""
    lost_by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(END_REASONS[1:], 0))
    """The agent's losses by how they ended: ``out_of_arena`` counts the agent flown out."""

    @property
    def mean_length_steps(self) -> float:
        """Mean episode length in decision steps."""
        return self.total_length_steps / max(self.episodes, 1)

    @property
    def rates(self) -> tuple[float, float, float]:
        """Win, draw and loss rates (0 each before any episode)."""
        n = max(self.episodes, 1)
        return self.wins / n, self.draws / n, self.losses / n

    def summary(self, decision_dt_s: float) -> dict:
        """Plain dict with rates, Wilson 95% intervals and lengths (for JSON)."""
        out = asdict(self)
        for key, k, rate in zip(("win", "draw", "loss"), (self.wins, self.draws, self.losses), self.rates, strict=True):
            out[f"{key}_rate"] = rate
            out[f"{key}_ci95"] = list(wilson_interval(k, self.episodes))
        out["mean_length_steps"] = self.mean_length_steps
        out["mean_length_s"] = self.mean_length_steps * decision_dt_s
        return out


def play_first_episodes(sim: BatchedSim, red: BaseAgent, blue: BaseAgent) -> dict[str, torch.Tensor]:
    """Run every environment of ``sim`` to the end of its first episode, red and blue flown by
    the given agents. Returns CPU tensors ``winner``, ``length_steps``, ``end_reason`` ``[N]``."""
    n, dev = sim.num_envs, sim.device
    for who, agent in (("red", red), ("blue", blue)):
        if agent.num_envs != n:
            raise ValueError(f"{who} agent has num_envs={agent.num_envs}, the simulator {n}")
    winner = torch.full((n,), -1, dtype=torch.int64, device=dev)
    length = torch.zeros(n, dtype=torch.int64, device=dev)
    reason = torch.zeros(n, dtype=torch.int64, device=dev)
    finished = torch.zeros(n, dtype=torch.bool, device=dev)
    obs = sim.reset()
    everyone = torch.ones(n, dtype=torch.bool, device=dev)
    red.reset(everyone)
    blue.reset(everyone)
    # Asking "all finished?" is a host read: every step on the CPU (free), every 16 elsewhere.
    check_every = 1 if dev.type == "cpu" else 16
    for step in range(sim.config.max_decisions + 1):
        actions = torch.stack([red.act(obs[:, 0]), blue.act(obs[:, 1])], dim=1)
        out = sim.step(actions)
        first = out.done & ~finished
        winner = torch.where(first, out.winner, winner)
        length = torch.where(first, out.episode_steps, length)
        reason = torch.where(first, out.end_reason, reason)
        finished |= out.done
        red.reset(out.done)
        blue.reset(out.done)
        obs = out.obs
        if step % check_every == check_every - 1 and bool(finished.all()):
            break
    sim.check_errors()
    if not bool(finished.all()):
        raise RuntimeError("some episodes did not end within the time limit; the simulator is broken")
    return {"winner": winner.cpu(), "length_steps": length.cpu(), "end_reason": reason.cpu()}


def play_match(
    agent: str,
    opponent: str,
    episodes: int,
    sim_config: SimConfig,
    seed: int = 0,
    device: str = "cpu",
    batch: int = 1024,
    deterministic: bool = False,
    recording: MatchRecorder | None = None,
) -> MatchStats:
    """``agent`` against ``opponent`` over ``episodes`` episodes (rounded up to even): each of
    ``ceil(episodes / 2)`` seeded starts is played with the agent as red and as blue.

    Policies sample from torch's global generator, so each batch runs under a forked generator
    seeded from ``seed`` (the caller's generator state is left untouched); ``deterministic``
    makes policy agents take their most likely action instead. ``recording`` records the first
    episodes of the first batch (half with the agent as red, half as blue) into replays."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    stats = MatchStats(agent, opponent)
    starts = (episodes + 1) // 2
    for b, first in enumerate(range(0, starts, batch)):
        n = min(batch, starts - first)
        for agent_side in (0, 1):
            # Same seed for both orientations: identical starts, sides swapped.
            sim = BatchedSim(n, sim_config, device=device, seed=seed * 100_003 + b)
            specs = (agent, opponent) if agent_side == 0 else (opponent, agent)
            flyers = [
                build_agent(
                    s, n, sim.layout, device, seed=seed * 2 + side, action_mode=sim_config.action_mode,
                    sim_config=sim_config, deterministic=deterministic,
                ).eval()
                for side, s in enumerate(specs)
            ]
            cuda = [sim.device] if sim.device.type == "cuda" else []
            recorder = None
            if recording is not None:
                recorder = recording.attach(sim, agent_side, (recording.remaining + 1 - agent_side) // (2 - agent_side))
            with torch.random.fork_rng(devices=cuda):
                torch.manual_seed(seed * 100_003 + b * 2 + agent_side)
                res = play_first_episodes(sim, flyers[0], flyers[1])
            if recording is not None:
                recording.collect(recorder)
            w = res["winner"]
            stats.episodes += n
            stats.wins += int((w == agent_side).sum())
            stats.losses += int((w == 1 - agent_side).sum())
            stats.draws += int((w == 2).sum())
            stats.total_length_steps += int(res["length_steps"].sum())
            reason = res["end_reason"]
            for tally, ended in ((stats.end_reasons, reason), (stats.won_by, reason[w == agent_side]),
                                 (stats.lost_by, reason[w == 1 - agent_side])):
                counts = torch.bincount(ended, minlength=len(END_REASONS))
                for i, name in enumerate(END_REASONS[1:], start=1):
                    tally[name] += int(counts[i])
    return stats
