"""A whole replay in memory (:class:`Replay`, read by :func:`sim.replay.format.load_replay`)
and the missile flights it holds (:class:`MissilePath`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.config import SimConfig

NAME_LIMIT = 200
"""The most characters of a name from a file that are shown."""


def printable(text: str, limit: int = NAME_LIMIT) -> str:
    """``text`` safe to print or draw: control and other unprintable characters escaped as
    ``repr`` escapes them (``\\x1b``, ``\\n``), cut to ``limit`` characters."""
    safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit + 1])
    return safe if len(safe) <= limit else safe[: limit - 3] + "..."


@dataclass
class Replay:
    """A whole replay in memory (:func:`load_replay`): the header, every frame array
    (``arrays[name]`` is ``[F, ...]``, see :mod:`sim.replay.format`), the events and the outcome."""

    header: dict[str, Any]
    arrays: dict[str, np.ndarray]
    events: list[dict[str, Any]]
    outcome: dict[str, Any]
    config: SimConfig
    """The sim config of the header (fields of a newer writer left out)."""
    path: Path | None = None

    def agent(self, side: str) -> str:
        """The agent that flew ``side`` (``red``, ``blue``) as the header names it, printable
        (:func:`printable`)."""
        return printable(str(self.header.get("agents", {}).get(side, "?")))

    @property
    def num_frames(self) -> int:
        return int(self.arrays["t_s"].shape[0])

    @property
    def missiles_per_fighter(self) -> int:
        return int(self.header["missiles_per_fighter"])

    def frame(self, i: int) -> dict[str, np.ndarray]:
        """Frame ``i`` as name -> array (views into :attr:`arrays`)."""
        return {k: v[i] for k, v in self.arrays.items()}

    def missile_paths(self) -> list[MissilePath]:
        """Every missile of the episode, in launch order: the frames it flew in, plus the frame
        it was lost in (its last position) when it was lost before the episode's end."""
        ids, active = self.arrays["m_id"], self.arrays["m_active"]
        paths: dict[int, MissilePath] = {}
        for s in range(2):
            for j in range(ids.shape[2]):
                for number in np.unique(ids[:, s, j]):
                    if number < 0:
                        continue
                    mine = ids[:, s, j] == number
                    flying = np.flatnonzero(mine & active[:, s, j])
                    if not flying.size:
                        continue
                    last = int(flying[-1])
                    lost = last + 1 < self.num_frames and bool(mine[last + 1]) and not active[last + 1, s, j]
                    frames = np.append(flying, last + 1) if lost else flying
                    paths[int(number)] = MissilePath(
                        int(number), s, j, frames, self.arrays["m_x"][frames, s, j].astype(np.float64),
                        self.arrays["m_y"][frames, s, j].astype(np.float64), lost)
        return [paths[k] for k in sorted(paths)]


@dataclass
class MissilePath:
    """One missile's flight in a replay (see :meth:`Replay.missile_paths`)."""

    missile: int
    """Its number in the episode (``m_id``)."""
    side: int
    slot: int
    frames: np.ndarray
    """Frame indices, launch first; the last is the frame it was lost in if ``lost``."""
    x: np.ndarray
    y: np.ndarray
    lost: bool
    """It was lost (hit, spent, target gone) before the episode ended."""
