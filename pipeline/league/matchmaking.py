"""A self-play league inside the batched actors (``--opponent league``): how the learner's
opponent is picked.

The pool (:mod:`pipeline.league.pool`) holds frozen snapshots of the learning policy and scripted
anchors. Each actor's environments are split into ``league.groups_per_actor`` groups
(``agents.grouped.GroupedOpponent``); before a chunk, every group that has held its opponent for
``league.hold_chunks`` chunks draws a new one and its environments start new episodes (the cut
episodes are bootstrapped like a time limit).

Counting is unbiased in episode length: a group whose time is up first *drains*, keeping its
opponent until every episode running at that moment has ended, and only then switches. Every
episode that started while a group held an opponent is counted, however long it lasted; the
episodes started during the drain (cut at the switch) are counted for nobody. Cutting
without the drain would count the short fights and lose the long ones (draws at the time
limit, which can outlast a whole hold).

Opponents are drawn by prioritized fictitious self-play: first the learner's latest self
(probability ``league.latest``: the actor's own current weights copied into the group, unrated),
else past selves (probability ``league.self_play``, once a snapshot exists and the run has
done ``league.self_play_from`` of its updates) or anchors, then within that kind with weight
``max((1 − p_win)^power, floor)``, ``p_win`` the learner's recent score against each (wins plus
``league.pfsp_draw`` times the draws, half by default, over about the last
``league.window_games`` games against it, with a prior of one game scored one half). The same
windowed counts give Bradley–Terry ratings on the Elo scale, refit at each report; total counts
are kept for the metrics (:mod:`pipeline.league.records`).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from actors.protocol import LeagueSeat, Replica
from agents.base import BaseAgent
from agents.grouped import GroupedOpponent
from agents.policy import PolicyAgent
from pipeline.config import ConfigError, LeagueConfig
from pipeline.league.pool import LeaguePool
from pipeline.league.records import LeagueRecords, Record

POLICY = "policy"
"""The candidate of every group into which a snapshot's weights are copied."""
LATEST = "latest"
"""The player drawn with ``league.latest``: the learner's own current weights (never rated)."""


def copy_weights(target: torch.nn.Module, source: Replica) -> None:
    """Copy ``source``'s weights (parameters and buffers, e.g. observation statistics) into
    ``target``'s own tensors: a group's policy slot takes the learner's latest self."""
    target.load_state_dict(source.state_dict())


@dataclass
class GroupState:
    player: str | None = None
    held: int = 0
    pending: torch.Tensor | None = None
    """While draining: the environments whose episode, running when the drain began, has not
    ended yet (``None`` when not draining)."""
    draws: int = 0
    """Opponents drawn so far (two draws of ``latest`` are two different opponents)."""


class League(LeaguePool, LeagueRecords):
    """The pool, the opponent draws, the results and the ratings of one run (the pool's methods
    come from :class:`LeaguePool`, the records' from :class:`LeagueRecords`).

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
        self.progress = 0.0
        """Fraction of the run's updates the learner has done, as last noted
        (:meth:`note_progress`: after each update, and on a resume): when past selves may be
        drawn."""

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

    # ------------------------------------------------------------------ the draws
    def weights(self, names: list[str]) -> list[float]:
        """PFSP weights of ``names``: ``max((1 − p_win)^power, floor)``."""
        power, floor, draw = self.config.pfsp_power, self.config.pfsp_floor, self.config.pfsp_draw
        return [max((1.0 - self.records[n].p_win(draw)) ** power, floor) for n in names]

    def draw(self) -> str:
        """One opponent: the latest self, or one by prioritized fictitious self-play (under the
        lock)."""
        if self.config.latest > 0 and self._rng.random() < self.config.latest:
            return LATEST
        selves = list(self.snapshots) if self.progress >= self.config.self_play_from else []
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
