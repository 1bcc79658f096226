"""Episode statistics of one actor, accumulated on its device without host syncs.

Counts are 0-dim device tensors updated with masks each step; the episode lengths of one chunk
are kept per step so the chunk's finished lengths can be read in one go at the chunk boundary,
the only place the host looks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sim import StepResult


@dataclass(frozen=True)
class EpisodeSummary:
    """Host-side totals of finished episodes (since the actor started, or a difference)."""

    episodes: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    length_sum: int = 0
    """Sum of episode lengths in decision steps."""
    return_sum: float = 0.0
    """Sum of episode returns under the actor's reward."""

    def __sub__(self, other: EpisodeSummary) -> EpisodeSummary:
        return EpisodeSummary(
            self.episodes - other.episodes, self.wins - other.wins, self.draws - other.draws,
            self.losses - other.losses, self.length_sum - other.length_sum,
            self.return_sum - other.return_sum,
        )

    def __add__(self, other: EpisodeSummary) -> EpisodeSummary:
        return EpisodeSummary(
            self.episodes + other.episodes, self.wins + other.wins, self.draws + other.draws,
            self.losses + other.losses, self.length_sum + other.length_sum,
            self.return_sum + other.return_sum,
        )

    @property
    def win_rate(self) -> float:
        """Wins per finished episode (0 when none finished)."""
        return self.wins / self.episodes if self.episodes else 0.0

    @property
    def mean_length(self) -> float:
        """Mean episode length in decision steps."""
        return self.length_sum / self.episodes if self.episodes else 0.0

    @property
    def mean_return(self) -> float:
        """Mean episode return."""
        return self.return_sum / self.episodes if self.episodes else 0.0


@dataclass(frozen=True)
class ChunkEpisodes:
    """The episodes that ended in an actor's last chunk, read on the host at its boundary."""

    wins: int
    draws: int
    losses: int
    lengths: torch.Tensor
    """Their lengths in decision steps (1-D)."""
    returns: torch.Tensor | None = None
    """Their returns (a Gymnasium env's actor; the sim's actors report outcomes instead)."""


class EpisodeStats:
    """Running per-environment returns and total outcome counts for one learning side."""

    def __init__(self, num_envs: int, rollout_len: int, learning_side: int, device: torch.device,
                 per_env: bool = False):
        self.side = learning_side
        self.per_env = per_env
        """Keep :attr:`env_results` and :attr:`env_first` (a league's actor needs them; other
        actors skip their cost)."""
        self.running_return = torch.zeros(num_envs, device=device)
        # wins, draws, losses, episodes, length_sum as int64; return_sum separately as float.
        self.counts = torch.zeros(5, dtype=torch.int64, device=device)
        self.return_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.chunk_done = torch.zeros(rollout_len, num_envs, dtype=torch.bool, device=device)
        self.chunk_lengths = torch.zeros(rollout_len, num_envs, dtype=torch.int64, device=device)
        self._start_counts = torch.zeros_like(self.counts)
        self.env_results = torch.zeros(3, num_envs, dtype=torch.int64, device=device)
        """Wins, draws and losses of each environment since :meth:`take_env_results` (a league
        sums them over the environments that faced one opponent)."""
        self.env_first = torch.full((num_envs,), -1, dtype=torch.int64, device=device)
        """The outcome of each environment's first episode to end since :meth:`take_env_results`:
        0 win, 1 draw, 2 loss, −1 none yet (a league draining a group counts only that one)."""

    def update_counts(self, out: StepResult, reward: torch.Tensor) -> None:
        """Fold one step's outcomes and rewards in (masked, no host sync). The chunk's per-step
        ``chunk_done`` / ``chunk_lengths`` rows are written by the actor's step targets."""
        done = out.done
        self.running_return.add_(reward)
        winner = out.winner
        won = done & (winner == self.side)
        lost = done & (winner == 1 - self.side)
        drew = done & (winner == 2)
        length = torch.where(done, out.episode_steps, 0)
        self.counts.add_(torch.stack([won.sum(), drew.sum(), lost.sum(), done.sum(), length.sum()]))
        if self.per_env:
            self.env_results.add_(torch.stack([won, drew, lost]))
            outcome = torch.where(won, 0, torch.where(drew, 1, 2))
            self.env_first.copy_(torch.where(done & (self.env_first < 0), outcome, self.env_first))
        self.return_sum.add_(torch.where(done, self.running_return, 0.0).sum().double())
        self.running_return.masked_fill_(done, 0.0)

    def begin_chunk(self) -> None:
        """Remember the totals at the start of a chunk (device copy, no sync)."""
        self._start_counts.copy_(self.counts)

    def chunk_outcomes(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Wins, draws, losses (0-dim) and the lengths (1-D) of episodes finished in the chunk.

        The lengths are a data-dependent selection: call at a chunk boundary only.
        """
        delta = self.counts - self._start_counts
        return delta[0], delta[1], delta[2], self.chunk_lengths[self.chunk_done]

    def take_env_results(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-environment wins, draws and losses ``[3, N]`` since the last call, and the
        outcome of each environment's first episode to end in that time ``[N]`` (0 win, 1 draw,
        2 loss, −1 none), on the host; both restart. At a chunk boundary only."""
        if not self.per_env:
            raise RuntimeError("per-environment results were not kept (EpisodeStats(per_env=False))")
        out = self.env_results.to("cpu", copy=True)  # .cpu() of a CPU tensor is itself
        first = self.env_first.to("cpu", copy=True)
        self.env_results.zero_()
        self.env_first.fill_(-1)
        return out, first

    def forget(self, env_mask: torch.Tensor) -> None:
        """Drop the running returns of episodes cut short where ``env_mask`` is set (they are
        never counted as finished)."""
        self.running_return.masked_fill_(env_mask, 0.0)

    def reset(self) -> None:
        """Zero every total and running return (in place: captured graphs keep their buffers)."""
        for t in (self.running_return, self.counts, self.return_sum, self._start_counts, self.env_results):
            t.zero_()
        self.env_first.fill_(-1)

    def summary(self) -> EpisodeSummary:
        """Host totals since this actor started (one host read)."""
        wins, draws, losses, episodes, length_sum = self.counts.tolist()
        return EpisodeSummary(episodes, wins, draws, losses, length_sum, float(self.return_sum))
