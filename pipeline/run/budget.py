"""The run's budget of chunks: claimed by actors, committed, trained, given back when stale."""

from __future__ import annotations

import asyncio


class Budget:
    """The run's chunks, counted so the learner trains on all of them.

    An actor claims a chunk before it writes one and gives the claim back if it fails. A chunk
    the learner drops as too stale is given back as well (:meth:`give_back`), and an actor
    writes a fresh one in its place, so a run trains its whole budget however many chunks
    policy lag cost it. Actors therefore stay until the budget is trained (:meth:`claim` waits
    while every chunk is claimed but not all are trained), and the learner trains a short last
    batch once every chunk is committed and none is left READY (:meth:`all_committed`).
    Everything here runs on the event loop's thread.
    """

    def __init__(self, total_chunks: int):
        self.total_chunks = total_chunks
        self.claimed = 0
        self.committed = 0
        """Chunks committed READY and not given back (trained, held or waiting in the ring)."""
        self.trained = 0
        self.given_back = 0
        """Stale chunks given back and written again."""
        self.stopped = False
        self._waiters: list[asyncio.Future[None]] = []

    async def claim(self) -> bool:
        """Reserve one chunk; False once the budget is trained or the run stops. While every
        chunk is claimed but some are not yet trained, wait: one may be given back."""
        while not self.stopped:
            if self.claimed < self.total_chunks:
                self.claimed += 1
                return True
            if self.trained >= self.total_chunks:
                return False
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            await fut
        return False

    def unclaim(self) -> None:
        """Give back a reserved chunk that was not produced."""
        self.claimed -= 1
        self._wake()

    def commit(self) -> None:
        """A claimed chunk was committed READY."""
        self.committed += 1

    def give_back(self) -> None:
        """A committed chunk was dropped unread (too stale): an actor writes it again."""
        self.claimed -= 1
        self.committed -= 1
        self.given_back += 1
        self._wake()

    def add_trained(self, chunks: int) -> None:
        """The learner trained on ``chunks`` chunks."""
        self.trained += chunks
        self._wake()

    def all_committed(self) -> bool:
        """Every chunk of the budget is committed: no more will come unless one is given back."""
        return self.committed >= self.total_chunks

    def stop(self) -> None:
        """No more claims; waiting actors return."""
        self.stopped = True
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
