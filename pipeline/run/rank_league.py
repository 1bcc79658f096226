"""One league for a job of several ranks: every rank's games in every rank's records.

Each rank's actors play against its own copy of the league (its pool is the same on every rank:
snapshots are taken at the same policy versions of identical learner replicas, so they need no
transfer). What differs is the games each rank's actors played. :class:`LeagueResults` sends,
with every update agreement of the ranks (:meth:`pipeline.run.ranks.Job.agree_to_update`),
the results this rank credited since the last exchange, and adds every other rank's to its
records, so the PFSP draws, the ratings and the saved ``league.json`` rest on the job's games.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.league.matchmaking import League

Results = dict[str, tuple[int, int, int]]
"""Wins, draws and losses of the learner against each opponent, by the opponent's name."""


class LeagueResults:
    """This rank's side of the exchange of game results (see the module docstring)."""

    def __init__(self, league: League, rank: int) -> None:
        self.league = league
        self.rank = rank
        self.own_games = 0
        """Games this rank's actors played, as exchanged so far."""
        with league._lock:
            # A resumed league already holds the job's earlier games on every rank.
            self.exchanged: Results = {n: (r.wins, r.draws, r.losses) for n, r in league.records.items()}

    def exchange(self, gather: Callable[[Results], list[Results]]) -> None:
        """Send this rank's new results through ``gather`` (an all-gather over the ranks, the
        same call on every rank) and add every other rank's to the records."""
        with self.league._lock:
            own = {n: _minus((r.wins, r.draws, r.losses), self.exchanged.get(n, (0, 0, 0)))
                   for n, r in self.league.records.items()}
        gathered = gather(own)
        window = self.league.config.window_games
        with self.league._lock:
            for name, record in self.league.records.items():
                others = (0, 0, 0)
                for rank, results in enumerate(gathered):
                    if rank != self.rank:
                        others = _plus(others, results.get(name, (0, 0, 0)))
                record.add(*others, window=window)
                self.exchanged[name] = _plus(_plus(self.exchanged.get(name, (0, 0, 0)), own.get(name, (0, 0, 0))),
                                             others)
            for name in set(self.exchanged) - set(self.league.records):
                del self.exchanged[name]  # a snapshot that left the pool
        self.own_games += sum(sum(r) for r in own.values())

    def games(self) -> int:
        """Games in this rank's records (every rank's, once exchanged)."""
        with self.league._lock:
            return sum(r.games for r in self.league.records.values())


def _plus(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def _minus(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
    return a[0] - b[0], a[1] - b[1], a[2] - b[2]
