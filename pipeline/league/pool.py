"""The league's pool: frozen snapshots of the learning policy and the scripted anchors.

A snapshot is taken every ``league.snapshot_every`` updates, or with ``league.snapshot_clock =
"learning"`` updates counted at the starting learning rate, so an annealed run's last updates do
not fill the pool with copies of one policy; none after ``league.snapshot_until`` of the run's
updates. Snapshots are kept in ``RUN/league/`` as ordinary checkpoints, the newest
``league.max_snapshots``. ``RUN/league/league.json`` (written atomically with every checkpoint:
the records, the draw generator's state, the last snapshot's version) and the snapshot files make
a resumed run continue the same league.
"""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import torch

from core.files import write_json_atomic
from learner.checkpoint import CheckpointError, list_checkpoints, load_policy, save_checkpoint
from pipeline.config import ConfigError, LeagueConfig
from pipeline.league.records import Record

STATE_FILE = "league.json"
"""The league's state in its folder; the file that marks a folder as a league's pool."""
STATE_VERSION = 1


def snapshot_name(version: int) -> str:
    """A snapshot's player name: ``v`` and the policy version it froze."""
    return f"v{version}"


class LeaguePool:
    """The pool side of :class:`pipeline.league.matchmaking.League`: its snapshots and anchors,
    the snapshot cadence, and the state file that a resumed run reads back."""

    config: LeagueConfig
    directory: Path
    anchors: list[str]
    snapshots: dict[str, dict[str, torch.Tensor]]
    records: dict[str, Record]
    _rng: random.Random
    _lock: threading.Lock
    _last_snapshot_version: int
    _last_snapshot_learning: tuple[int, float]
    _learning: tuple[int, float]

    # ------------------------------------------------------------------ the pool
    def players(self) -> list[str]:
        """Every opponent in the pool: anchors, then snapshots oldest first."""
        return [*self.anchors, *self.snapshots]

    def add_snapshot(self, name: str, weights: dict[str, torch.Tensor]) -> None:
        """Put a snapshot in the pool (the oldest leaves beyond ``max_snapshots``)."""
        with self._lock:
            self.snapshots[name] = {k: v.detach().to("cpu", copy=True) for k, v in weights.items()}
            self.records.setdefault(name, Record())
            while len(self.snapshots) > self.config.max_snapshots:
                oldest = next(iter(self.snapshots))
                del self.snapshots[oldest]
                del self.records[oldest]  # no longer drawn, rated or exported

    def learning_done(self, learner: Any, version: int) -> float:
        """The learning of the learner's first ``version`` updates on ``snapshot_clock``: on
        ``"learning"``, the sum of each update's learning rate over the starting rate; on
        ``"updates"`` (or for a learner without a schedule), ``version``. Kept incrementally:
        the learner thread asks for each version in turn."""
        schedule = getattr(learner, "learning_rate_at", None)
        if self.config.snapshot_clock == "updates" or schedule is None:
            return float(version)
        start = float(learner.config.learning_rate)
        done_version, done = self._learning
        if version < done_version:
            done_version, done = 0, 0.0
        for v in range(done_version, version):
            done += schedule(v) / start
        self._learning = (version, done)
        return done

    def maybe_snapshot(self, learner: Any) -> Path | None:
        """Freeze the learner into the pool each time its learning on ``snapshot_clock`` passes
        another multiple of ``snapshot_every``, until ``snapshot_until`` of the run's updates
        (learner thread)."""
        version = int(learner.policy_version)
        if version <= 0 or version == self._last_snapshot_version:
            return None
        if version > self.config.snapshot_until * learner.config.total_updates:
            return None
        every = self.config.snapshot_every
        last = max(self._last_snapshot_version, 0)
        if last != self._last_snapshot_learning[0]:  # a resumed run: count up to its last snapshot
            self._last_snapshot_learning = (last, self.learning_done(learner, last))
        learned = self.learning_done(learner, version)
        if learned // every <= self._last_snapshot_learning[1] // every:
            return None
        self._last_snapshot_version = version
        self._last_snapshot_learning = (version, learned)
        path = save_checkpoint(self.directory, learner, {"league_snapshot": snapshot_name(version)},
                               keep_last=self.config.max_snapshots)
        self.add_snapshot(snapshot_name(version), learner.policy.state_dict())
        return path

    # ------------------------------------------------------------------ persistence
    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "version": STATE_VERSION,
                "anchors": self.anchors,
                "snapshots": list(self.snapshots),
                "records": {n: {"wins": r.wins, "draws": r.draws, "losses": r.losses, "recent": r.recent}
                            for n, r in self.records.items()},
                "rng": list(self._rng.getstate()[1]),
                "last_snapshot_version": self._last_snapshot_version,
            }

    def save(self) -> Path:
        """Write ``league.json`` atomically."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / STATE_FILE
        write_json_atomic(path, self.state())
        return path

    def load(self, device: torch.device | str = "cpu") -> None:
        """Take up the league of an earlier part of this run: its snapshot files (the newest
        ``max_snapshots``) and its records. A damaged file is a ``ConfigError`` naming it."""
        path = self.directory / STATE_FILE
        records: dict[str, Any] = {}
        if path.is_file():
            try:
                data = json.loads(path.read_text())
                if data.get("version") != STATE_VERSION:
                    raise ValueError(f"format version {data.get('version')!r}, expected {STATE_VERSION}")
                records = dict(data["records"])
                self._last_snapshot_version = int(data.get("last_snapshot_version", -1))
                rng = data.get("rng")
                if rng:
                    self._rng.setstate((3, tuple(rng), None))
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"league state {path} cannot be read: {exc}") from None
        for file in list_checkpoints(self.directory)[-self.config.max_snapshots:]:
            try:
                policy = load_policy(file, device="cpu")
            except CheckpointError as exc:
                raise ConfigError(f"league snapshot {file} fails to load: {exc}") from None
            self.add_snapshot(snapshot_name(int(policy.policy_version)), policy.state_dict())
        for name, r in records.items():
            if name in self.records:
                self.records[name] = Record(int(r["wins"]), int(r["draws"]), int(r["losses"]),
                                            [float(x) for x in r["recent"]])
