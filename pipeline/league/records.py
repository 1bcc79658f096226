"""What the league keeps of the learner's games: per-opponent records (total counts for the
metrics, decayed recent counts for the draws) and the Bradley–Terry ratings refit from them."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from pipeline.evaluation.matches import MatchStats
from pipeline.evaluation.ratings import bradley_terry

LEARNER = "learner"
"""The learning policy's name in the ratings."""


@dataclass
class Record:
    """The learner's results against one opponent."""

    wins: int = 0
    draws: int = 0
    losses: int = 0
    recent: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    """Wins, draws, losses over about the last ``window_games`` games (decayed per game)."""

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    def add(self, wins: int, draws: int, losses: int, window: int) -> None:
        n = wins + draws + losses
        if n == 0:
            return
        self.wins += wins
        self.draws += draws
        self.losses += losses
        keep = (1.0 - 1.0 / window) ** n
        self.recent = [keep * r + new for r, new in zip(self.recent, (wins, draws, losses), strict=True)]

    def p_win(self, draw: float = 0.5) -> float:
        """The learner's recent score (wins plus ``draw`` times the draws; half by default),
        with a prior of one game scored one half."""
        w, d, l_ = self.recent
        return (w + draw * d + 0.5) / (w + d + l_ + 1.0)


class LeagueRecords:
    """The records side of :class:`pipeline.league.matchmaking.League`: the learner's results
    against each opponent and the ratings fitted to them."""

    anchors: list[str]
    snapshots: dict[str, dict[str, torch.Tensor]]
    records: dict[str, Record]
    ratings: dict[str, float]
    _lock: threading.Lock

    def refit(self) -> dict[str, float]:
        """Bradley–Terry ratings (Elo scale) of the learner and every opponent it has played,
        from the recent counts."""
        with self._lock:
            recent = {n: list(r.recent) for n, r in self.records.items() if sum(r.recent) > 0}
        if not recent:
            self.ratings = {}
            return self.ratings
        matches = [MatchStats(LEARNER, n, episodes=sum(c), wins=c[0], draws=c[1], losses=c[2])  # type: ignore[arg-type]
                   for n, c in recent.items()]
        fit = bradley_terry([LEARNER, *recent], matches, iterations=2000, tol=1e-8)
        self.ratings = {n: v["elo"] for n, v in fit.items()}
        return self.ratings

    def games(self) -> dict[tuple[str, str], int]:
        """Total games by (opponent, outcome of the learner)."""
        with self._lock:
            out: dict[tuple[str, str], int] = {}
            for n, r in self.records.items():
                out[(n, "win")], out[(n, "draw")], out[(n, "loss")] = r.wins, r.draws, r.losses
            return out

    def standing(self) -> dict[str, tuple[float, float, float, int]]:
        """Each opponent the learner has played recently: its recent (win, draw, loss) rates
        and the games so far."""
        out: dict[str, tuple[float, float, float, int]] = {}
        with self._lock:
            for name, r in self.records.items():
                n = sum(r.recent)
                if n > 0:
                    out[name] = (r.recent[0] / n, r.recent[1] / n, r.recent[2] / n, r.games)
        return out

    def summary(self) -> str:
        """One line for the display: the learner's rating and the opponent it scores worst against."""
        if not self.ratings:
            return "league: no games yet"
        with self._lock:
            played = {n: r.p_win() for n, r in self.records.items() if r.games}
        worst = min(played, key=played.__getitem__) if played else "-"
        pool = f"{len(self.snapshots)} snapshots + {len(self.anchors)} anchors"
        score = f"{played[worst]:.0%}" if played else "-"
        return (f"league: learner {self.ratings.get(LEARNER, 1500):.0f} Elo, hardest {worst} "
                f"(score {score}), pool {pool}")
