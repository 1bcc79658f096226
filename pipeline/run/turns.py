"""The order in which a ``--sync`` run's loops take their turns.

In sync mode one party works at a time: actor 0 writes a chunk, then the learner trains on every
batch the ring holds, then actor 1 writes a chunk, then the learner, and so on round the actors
(one that has left is skipped). Which actor fills which slot, with which weights, and which
chunks each update trains on are then a function of the config alone, never of the timing
between the event loop and the worker thread: while one party holds the turn every other one
waits for it, so no thread's wake-up can reorder them. Async mode has no turns.
"""

from __future__ import annotations

import asyncio

LEARNER = -1
"""The learner's party number (actors are numbered from 0)."""


class TurnOrder:
    """Who holds the turn: actor 0, the learner, actor 1, the learner, ..., round the actors.

    Everything here runs on the event loop's thread. A stopping run opens the order
    (:meth:`open`): every party goes on at once to see the run stop, as in async mode.
    """

    def __init__(self, actors: int):
        self._actors = list(range(actors))
        """Actors that have not left, in turn order."""
        self._learner = True
        self.holder: int | None = self._actors[0] if self._actors else LEARNER
        """The party whose turn it is (None once every party has left)."""
        self._last_actor = -1
        self._opened = False
        self._waiters: dict[int, asyncio.Future[None]] = {}

    @property
    def opened(self) -> bool:
        """Whether :meth:`open` was called: turns no longer hold anyone back."""
        return self._opened

    def actors_left(self) -> bool:
        """Whether some actor has not left yet (and may still write a chunk)."""
        return bool(self._actors)

    async def take(self, party: int) -> None:
        """Wait until it is ``party``'s turn (at once when it is, or the order is open)."""
        while not self._opened and self.holder != party:
            fut = asyncio.get_running_loop().create_future()
            self._waiters[party] = fut
            await fut

    def end(self, party: int) -> None:
        """``party`` is done with its turn: after an actor the learner's turn, after the learner
        the next actor's. Nothing happens when it is not ``party``'s turn."""
        if self.holder != party:
            return
        if party != LEARNER:
            self._last_actor = party
        if party != LEARNER and self._learner:
            self._hand_to(LEARNER)
            return
        later = [a for a in self._actors if a > self._last_actor]
        following = (later or self._actors)[:1]
        self._hand_to(following[0] if following else LEARNER if self._learner else None)

    def leave(self, party: int) -> None:
        """``party`` takes no more turns (its loop ended); its turn, if it held it, goes on."""
        if party == LEARNER:
            self._learner = False
        elif party in self._actors:
            self._actors.remove(party)
        self.end(party)

    def open(self) -> None:
        """Let every party go on at once, now and from now on (the run is stopping)."""
        self._opened = True
        for party in list(self._waiters):
            self._wake(party)

    def _hand_to(self, party: int | None) -> None:
        self.holder = party
        if party is not None:
            self._wake(party)

    def _wake(self, party: int) -> None:
        fut = self._waiters.pop(party, None)
        if fut is not None and not fut.done():
            fut.set_result(None)
