"""A self-play league inside the batched actors (``--opponent league``).

The pool holds frozen snapshots of the learning policy (one every ``league.snapshot_every``
updates, or with ``league.snapshot_clock = "learning"`` updates counted at the starting learning
rate, so an annealed run's last updates do not fill the pool with copies of one policy; kept in
``RUN/league/`` as ordinary checkpoints, the newest ``league.max_snapshots``)
and scripted anchors. Each actor's environments are split into ``league.groups_per_actor``
groups (``agents.grouped.GroupedOpponent``); before a chunk, every group that has held its
opponent for ``league.hold_chunks`` chunks draws a new one and its environments start new
episodes (the cut episodes are bootstrapped like a time limit).

Counting is unbiased in episode length: a group whose time is up first *drains*, keeping its
opponent until every episode running at that moment has ended, and only then switches. Every
episode that started while a group held an opponent is counted, however long it lasted; the
episodes started during the drain (cut at the switch) are counted for nobody. Cutting
without the drain would count the short fights and lose the long ones (draws at the time
limit, which can outlast a whole hold).

Opponents are drawn by prioritized fictitious self-play: first the learner's latest self
(probability ``league.latest``: the actor's own current weights copied into the group, unrated),
else past selves (probability ``league.self_play``, once a snapshot exists) or anchors, then within that kind with weight
``max((1 − p_win)^power, floor)``, ``p_win`` the learner's recent score against each (wins plus
half the draws, over about the last ``league.window_games`` games against it, with a prior of
one draw). The same windowed counts give Bradley–Terry ratings on the Elo scale, refit at each
report; total counts are kept for the metrics. ``RUN/league/league.json`` (written atomically
with every checkpoint) and the snapshot files make a resumed run continue the same league.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from actors.protocol import LeagueSeat, Replica
from agents.base import BaseAgent
from agents.grouped import GroupedOpponent
from agents.policy import PolicyAgent
from learner.checkpoint import CheckpointError, list_checkpoints, load_policy, save_checkpoint
from pipeline.config import ConfigError, LeagueConfig
from pipeline.evaluate import MatchStats, bradley_terry, write_json_atomic

LEARNER = "learner"
"""The learning policy's name in the ratings."""
POLICY = "policy"
"""The candidate of every group into which a snapshot's weights are copied."""
LATEST = "latest"
"""The player drawn with ``league.latest``: the learner's own current weights (never rated)."""
STATE_FILE = "league.json"
STATE_VERSION = 1


def copy_weights(target: torch.nn.Module, source: Replica) -> None:
    """Copy ``source``'s weights (parameters and buffers, e.g. observation statistics) into
    ``target``'s own tensors: a group's policy slot takes the learner's latest self."""
    target.load_state_dict(source.state_dict())


def snapshot_name(version: int) -> str:
    """A snapshot's player name: ``v`` and the policy version it froze."""
    return f"v{version}"


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

    def p_win(self) -> float:
        """The learner's recent score (wins plus half the draws), a prior of one draw."""
        w, d, l_ = self.recent
        return (w + 0.5 * d + 0.5) / (w + d + l_ + 1.0)


@dataclass
class GroupState:
    player: str | None = None
    held: int = 0
    pending: torch.Tensor | None = None
    """While draining: the environments whose episode, running when the drain began, has not
    ended yet (``None`` when not draining)."""
    draws: int = 0
    """Opponents drawn so far (two draws of ``latest`` are two different opponents)."""


class League:
    """The pool, the opponent draws, the results and the ratings of one run.

    Args:
        config: the ``[league]`` section.
        directory: ``RUN/league`` (snapshots and ``league.json``).
        seed: seeds the opponent draws.
        make_policy: builds a network with the learner's architecture (a group's policy slot).
    """

    def __init__(self, config: LeagueConfig, directory: Path, seed: int,
                 make_policy: Callable[[], torch.nn.Module]):
        self.config = config
        self.directory = directory
        self.make_policy = make_policy
        self.anchors = list(config.anchors)
        self.snapshots: dict[str, dict[str, torch.Tensor]] = {}
        """Snapshot name → its policy weights (CPU), oldest first."""
        self.records: dict[str, Record] = {name: Record() for name in self.anchors}
        self.ratings: dict[str, float] = {}
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._groups: dict[int, tuple[int, list[GroupState]]] = {}
        self._last_snapshot_version = -1
        self._last_snapshot_learning = (0, 0.0)
        """(version, learning done by it) of the last snapshot."""
        self._learning = (0, 0.0)
        """(version, learning done by it) last counted by :meth:`learning_done`."""

    # ------------------------------------------------------------------ building
    def make_opponent(self, num_envs: int, build_anchor: Callable[[str, int, int], BaseAgent],
                      device: torch.device, seed: int, select_on_device: bool) -> GroupedOpponent:
        """One actor's opponent: ``groups_per_actor`` groups, each with every anchor (built by
        ``build_anchor(name, group_envs, seed)``) and one policy slot."""
        groups = self.config.groups_per_actor
        if num_envs % groups:
            raise ConfigError(f"actors.envs_per_actor ({num_envs}) must be a multiple of "
                              f"league.groups_per_actor ({groups})")
        size = num_envs // groups
        candidates: list[dict[str, BaseAgent]] = []
        for g in range(groups):
            group: dict[str, BaseAgent] = {}
            for k, name in enumerate(self.anchors):
                group[name] = build_anchor(name, size, seed * 1009 + g * 31 + k).eval()
            net = self.make_policy().to(device).eval()
            for p in net.parameters():
                p.requires_grad_(False)
            group[POLICY] = PolicyAgent(net, size, seed=seed * 1009 + g * 31 + len(self.anchors)).eval()
            candidates.append(group)
        return GroupedOpponent(candidates, select_on_device=select_on_device)

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

    def weights(self, names: list[str]) -> list[float]:
        """PFSP weights of ``names``: ``max((1 − p_win)^power, floor)``."""
        power, floor = self.config.pfsp_power, self.config.pfsp_floor
        return [max((1.0 - self.records[n].p_win()) ** power, floor) for n in names]

    def draw(self) -> str:
        """One opponent: the latest self, or one by prioritized fictitious self-play (under the
        lock)."""
        if self.config.latest > 0 and self._rng.random() < self.config.latest:
            return LATEST
        selves = list(self.snapshots)
        use_selves = bool(selves) and (not self.anchors or self._rng.random() < self.config.self_play)
        names = selves if use_selves else self.anchors
        return self._rng.choices(names, weights=self.weights(names))[0]

    # ------------------------------------------------------------------ the actors
    def before_chunk(self, actor: LeagueSeat) -> None:
        """Credit the groups' results since the last call to their opponents, drain every group
        whose time is up, and give every drained group a new opponent (its environments
        restart). Called by the actor's own thread between two of its chunks."""
        opponent = actor.opponent
        if not isinstance(opponent, GroupedOpponent):
            raise TypeError(f"actor {actor.actor_id} has no league opponent")
        results, first = actor.stats.take_env_results()
        restart = torch.zeros(opponent.num_envs, dtype=torch.bool)
        with self._lock:
            known = self._groups.get(actor.actor_id)
            if known is None or known[0] != id(opponent):  # a new or restarted actor
                known = (id(opponent), [GroupState() for _ in range(opponent.num_groups)])
                self._groups[actor.actor_id] = known
            for g, state in enumerate(known[1]):
                a, b = opponent.bounds[g]
                if state.player is not None:
                    self._credit(state, results[:, a:b], first[a:b])
                state.held += 1
                # A snapshot that left the pool is switched away from at once.
                playing = state.player == LATEST or state.player in self.records
                if playing and state.held < self.config.hold_chunks:
                    continue
                if playing and state.pending is None:  # time is up: let the running episodes end
                    state.pending = torch.ones(b - a, dtype=torch.bool)
                if playing and state.pending is not None and bool(state.pending.any()):
                    continue
                self._switch(opponent, g, state, getattr(actor, "policy", None))
                restart[a:b] = True
        if bool(restart.any()):
            actor.restart_envs(restart.to(actor.device))

    def _credit(self, state: GroupState, results: torch.Tensor, first: torch.Tensor) -> None:
        """Add a group's results to its opponent's record: every episode ended while holding,
        only the pending ones' while draining (under the lock)."""
        record = self.records.get(state.player or "")
        if state.pending is None:
            w, d, l_ = (int(x) for x in results.sum(1))
        else:
            ended = state.pending & (first >= 0)
            w, d, l_ = (int(((first == k) & ended).sum()) for k in range(3))
            state.pending &= ~ended
        if record is not None:  # a snapshot that left the pool is no longer rated
            record.add(w, d, l_, self.config.window_games)

    def _switch(self, opponent: GroupedOpponent, g: int, state: GroupState,
                latest: torch.nn.Module | None) -> None:
        """Draw group ``g``'s next opponent and load it (under the lock). ``latest`` is the
        actor's own policy (``None`` for an actor process's mirror, whose process copies its own
        when told to play :data:`LATEST`)."""
        new = self.draw()
        state.held, state.pending, state.player = 0, None, new
        state.draws += 1
        if new in self.snapshots or new == LATEST:
            slot = opponent.candidates[g][POLICY]
            assert isinstance(slot, PolicyAgent)
            if new in self.snapshots:
                slot.policy.load_state_dict(self.snapshots[new])  # copied into its weights
            elif latest is not None:
                copy_weights(slot.policy, latest)
            opponent.assign(g, POLICY)
        else:
            opponent.assign(g, new)

    def assignments(self) -> dict[int, list[str | None]]:
        """Each actor's groups' current opponents."""
        with self._lock:
            return {a: [s.player for s in states] for a, (_, states) in self._groups.items()}

    def draws_of(self, actor_id: int) -> list[tuple[str | None, int]]:
        """An actor's groups' current opponents, each with the number of draws that group has
        made (a new number is a new opponent, even when the name is :data:`LATEST` again)."""
        with self._lock:
            known = self._groups.get(actor_id)
            return [] if known is None else [(s.player, s.draws) for s in known[1]]

    # ------------------------------------------------------------------ ratings
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

