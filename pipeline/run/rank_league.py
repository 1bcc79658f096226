"""One league for a job of several ranks: every rank's games in every rank's records.

Each rank's actors play against its own copy of the league (its pool is the same on every rank:
snapshots are taken at the same policy versions of identical learner replicas, so they need no
transfer). What differs is the games each rank's actors played. :class:`LeagueResults` sends,
with every update agreement of the ranks (:meth:`pipeline.run.ranks.Job.agree_to_update`),
the results this rank credited since the last exchange, and adds every other rank's to its
records, so the PFSP draws, the ratings and the saved ``league.json`` rest on the job's games.

The results travel in the agreement's own all-reduce (:meth:`LeagueResults.pack`): a vector
of fixed length, one (wins, draws, losses) slot per opponent the pool can hold, in the order of
the names, with a signature of the names so every rank can tell that all ranks counted the same
opponents in the same slots. Summed over the ranks, a slot less this rank's own entries is the
other ranks' results. Where the signatures disagree (a pool that differs between ranks, or
more opponents than slots), every rank sees it in the same sums and all fall back to an
all-gather of the results by name (:meth:`LeagueResults.exchange`): one collective of integers
per update in the common case, instead of two of pickled objects.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.league.matchmaking import League

Results = dict[str, tuple[int, int, int]]
"""Wins, draws and losses of the learner against each opponent, by the opponent's name."""
SIGNATURE_MASK = (1 << 20) - 1
"""The names' signature is 20 bits of their CRC-32, so its square summed over up to 2^20 ranks
stays inside int64."""


@dataclass(frozen=True)
class Packed:
    """One rank's new results, as :meth:`LeagueResults.pack` put them in the all-reduce."""

    names: list[str]
    """The opponents, in slot order."""
    own: Results
    """This rank's results since the last exchange."""
    vector: list[int]
    """What this rank adds to the sum."""


class LeagueResults:
    """This rank's side of the exchange of game results (see the module docstring)."""

    def __init__(self, league: League, rank: int) -> None:
        self.league = league
        self.rank = rank
        self.own_games = 0
        """Games this rank's actors played, as exchanged so far."""
        self.packed = 0
        """Exchanges that rode in the update agreement's all-reduce (:meth:`unpack`)."""
        self.by_name = 0
        """Exchanges that fell back to the all-gather by name (:meth:`exchange`)."""
        with league._lock:
            # A resumed league already holds the job's earlier games on every rank.
            self.exchanged: Results = {n: (r.wins, r.draws, r.losses) for n, r in league.records.items()}

    @property
    def slots(self) -> int:
        """Opponents the pool can hold: the anchors and the snapshots kept."""
        return len(self.league.anchors) + self.league.config.max_snapshots

    def _own(self) -> Results:
        with self.league._lock:
            return {n: _minus((r.wins, r.draws, r.losses), self.exchanged.get(n, (0, 0, 0)))
                    for n, r in self.league.records.items()}

    def pack(self) -> Packed:
        """This rank's new results as integers to sum over the ranks (see the module docstring):
        ``[fits, signature, signature², (wins, draws, losses) per slot]``."""
        own = self._own()
        names = sorted(own)
        fits = len(names) <= self.slots
        signature = zlib.crc32("\n".join(names).encode()) & SIGNATURE_MASK if fits else 0
        vector = [int(fits), signature, signature * signature] + [0] * (3 * self.slots)
        if fits:
            for k, name in enumerate(names):
                vector[3 + 3 * k:6 + 3 * k] = own[name]
        return Packed(names, own, vector)

    def unpack(self, packed: Packed, summed: list[int], world_size: int) -> bool:
        """Add the other ranks' results from ``summed`` (``packed.vector`` summed over the
        ``world_size`` ranks) to the records; False, with nothing added, where the ranks did not
        all pack the same names (then every rank gets False: call :meth:`exchange`)."""
        fits, signature, square = packed.vector[:3]
        if summed[:3] != [world_size * fits, world_size * signature, world_size * square] or not fits:
            return False  # equal sums and sums of squares: every rank's signature is this one
        others = {name: _minus((summed[3 + 3 * k], summed[4 + 3 * k], summed[5 + 3 * k]), packed.own[name])
                  for k, name in enumerate(packed.names)}
        self._add(packed.own, lambda name: others.get(name, (0, 0, 0)))
        self.packed += 1
        return True

    def exchange(self, gather: Callable[[Results], list[Results]]) -> None:
        """Send this rank's new results through ``gather`` (an all-gather over the ranks, the
        same call on every rank) and add every other rank's to the records."""
        own = self._own()
        gathered = gather(own)

        def others(name: str) -> tuple[int, int, int]:
            total = (0, 0, 0)
            for rank, results in enumerate(gathered):
                if rank != self.rank:
                    total = _plus(total, results.get(name, (0, 0, 0)))
            return total

        self._add(own, others)
        self.by_name += 1

    def _add(self, own: Results, others: Callable[[str], tuple[int, int, int]]) -> None:
        window = self.league.config.window_games
        with self.league._lock:
            for name, record in self.league.records.items():
                theirs = others(name)
                record.add(*theirs, window=window)
                self.exchanged[name] = _plus(_plus(self.exchanged.get(name, (0, 0, 0)), own.get(name, (0, 0, 0))),
                                             theirs)
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
