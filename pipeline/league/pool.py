"""The league's pool: frozen snapshots of the learning policy and the scripted anchors.

A snapshot is taken every ``league.snapshot_every`` updates, or with ``league.snapshot_clock =
"learning"`` updates counted at the starting learning rate, so an annealed run's last updates do
not fill the pool with copies of one policy; none after ``league.snapshot_until`` of the run's
updates. Snapshots are kept in ``RUN/league/`` as ordinary checkpoints, the newest
``league.max_snapshots``. ``RUN/league/league.json`` (written atomically with every checkpoint:
the records, the draw generator's state, the last snapshot's version;
:mod:`pipeline.league.state`) and the snapshot files make a resumed run continue the same league.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from core.command import squeezed
from core.files import write_json_atomic
from learner.checkpoint import (
    CheckpointError,
    NonFiniteStateError,
    list_checkpoints,
    load_policy,
    save_checkpoint,
)
from learner.network import ActorCritic
from pipeline.config import ConfigError, LeagueConfig
from pipeline.config.specs import load_checkpoint_agent
from pipeline.league.records import Record
from pipeline.league.state import STATE_FILE, STATE_VERSION, StateLimits, read_state, snapshot_name
from sim import ObsLayout, SimConfig

_CHECKPOINT_NOTE = re.compile(r" \((?:the last good checkpoint is .*|no earlier checkpoint exists)\)$")
"""The note a failed checkpoint write ends with; a snapshot is no checkpoint of the run."""


class SnapshotNotWritten(Exception):
    """A snapshot that could not be written (a full disk): the run goes on without it."""


class LeagueStateNotWritten(CheckpointError):
    """``league.json`` could not be written (the run's checkpoint before it was)."""


def _write_failure(exc: CheckpointError | OSError) -> str:
    """What went wrong writing a snapshot, with the file, as one line."""
    if isinstance(exc, CheckpointError):
        return _CHECKPOINT_NOTE.sub("", squeezed(exc))
    return f"{(exc.strerror or str(exc)).lower()}: {exc.filename}"


class LeaguePool:
    """The pool side of :class:`pipeline.league.matchmaking.League`: its snapshots and anchors,
    the snapshot cadence, and the state file that a resumed run reads back."""

    config: LeagueConfig
    directory: Path
    make_policy: Callable[[], torch.nn.Module]
    anchors: list[str]
    snapshots: dict[str, dict[str, torch.Tensor]]
    records: dict[str, Record]
    _rng: random.Random
    _lock: threading.Lock
    _last_snapshot_version: int
    _last_snapshot_learning: tuple[int, float]
    _learning: tuple[int, float]
    progress: float

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

    def note_progress(self, version: int, total_updates: int) -> None:
        """Note that the learner has done ``version`` of the run's ``total_updates`` updates
        (``self_play_from``): after each update, and when a resumed run takes up its league."""
        self.progress = version / max(total_updates, 1)

    def maybe_snapshot(self, learner: Any) -> Path | None:
        """Freeze the learner into the pool each time its learning on ``snapshot_clock`` passes
        another multiple of ``snapshot_every``, until ``snapshot_until`` of the run's updates
        (learner thread), and note the run's progress (``self_play_from``). A snapshot that
        cannot be written (a full disk) raises
        :class:`SnapshotNotWritten` and is left out of the pool; the next one is due at the
        next multiple."""
        version = int(learner.policy_version)
        self.note_progress(version, learner.config.total_updates)
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
        name = snapshot_name(version)
        try:
            path = save_checkpoint(self.directory, learner, {"league_snapshot": name},
                                   keep_last=self.config.max_snapshots)
        except NonFiniteStateError:
            raise  # the learner itself is broken: the run stops
        except (CheckpointError, OSError) as exc:
            raise SnapshotNotWritten(
                f"snapshot {name} not written ({_write_failure(exc)}); the run goes on without it, "
                f"{len(self.snapshots)} snapshot(s) in the pool") from exc
        self.add_snapshot(name, learner.policy.state_dict())
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
        """Write ``league.json`` atomically; a failed write is a one-line
        :class:`LeagueStateNotWritten` naming it."""
        path = self.directory / STATE_FILE
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, self.state())
        except OSError as exc:
            raise LeagueStateNotWritten(f"league state {path} not written: "
                                  f"{(exc.strerror or str(exc)).lower()}") from exc
        return path

    def load(self, directory: Path | None = None, *, limits: StateLimits | None = None,
             sim_config: SimConfig | None = None) -> list[str]:
        """Take up the league of an earlier part of this run from ``directory`` (default: this
        league's own folder): its snapshot files (the newest ``max_snapshots``) and its
        ``league.json``, checked by :func:`pipeline.league.state.read_state` (against
        ``limits`` when given). Given the simulator's config, each snapshot must also fit this
        run: its observation layout, size and action mode checked as every checkpoint entrant
        of an evaluation's is (:func:`pipeline.config.specs.load_checkpoint_agent`), and its
        network the learner's. Anything wrong is a one-line ``ConfigError`` naming the file.
        Returns what the display should say: a missing ``league.json`` restarts the records
        (the snapshots are kept)."""
        folder = directory if directory is not None else self.directory
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{folder} is not a directory (the league's snapshots and {STATE_FILE})")
        path = folder / STATE_FILE
        saved = read_state(path, limits)
        versions = []
        for file in list_checkpoints(folder)[-self.config.max_snapshots:]:
            version, weights = self._read_snapshot(file, sim_config)
            versions.append(version)
            self.add_snapshot(snapshot_name(version), weights)
        if saved is None:
            self._last_snapshot_version = max(versions, default=-1)
            kept = f"; its {len(versions)} snapshot(s) stay in the pool" if versions else ""
            return [f"{path} is missing: the league's records start again from zero{kept}"]
        self._last_snapshot_version = saved.last_snapshot_version
        self._rng.setstate((3, tuple(saved.rng), None))
        for name, r in saved.records.items():
            if name in self.records:  # a snapshot no longer in the folder, an anchor no longer named
                self.records[name] = Record(r.wins, r.draws, r.losses, list(r.recent))
        return []

    def _read_snapshot(self, file: Path, sim_config: SimConfig | None) -> tuple[int, dict[str, torch.Tensor]]:
        """A snapshot file's policy version and weights, checked as :meth:`load` says."""
        try:
            if sim_config is None:
                policy = load_policy(file, device="cpu")
            else:
                agent = load_checkpoint_agent(str(file), 1, ObsLayout.from_config(sim_config), "cpu",
                                              sim_config=sim_config)
                assert isinstance(agent.policy, ActorCritic)
                policy = agent.policy
                slot = self.make_policy()  # what a group's policy slot holds
                saved = policy.init_kwargs()
                learner = slot.init_kwargs() if isinstance(slot, ActorCritic) else saved
                if saved != learner:
                    diff = {k: (saved.get(k), v) for k, v in learner.items() if saved.get(k) != v}
                    raise ValueError(f"it holds another network than the learner's (snapshot, learner): {diff}")
                slot.load_state_dict(policy.state_dict())
        except CheckpointError as exc:
            raise ConfigError(f"league snapshot {file} fails to load: {exc}") from None
        except (ValueError, RuntimeError) as exc:
            detail = next((s.strip() for s in str(exc).splitlines()[1:] if s.strip()), str(exc))
            raise ConfigError(f"league snapshot {file} cannot play in this run: {detail}") from None
        return int(policy.policy_version), policy.state_dict()
