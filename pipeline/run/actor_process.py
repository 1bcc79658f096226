"""Sim actors in worker processes: a CPU host's actors that do not share the learner's GIL.

On a CPU-only host the actor threads and the learner thread of one process take turns at one
GIL (a chunk of 64 envs is mostly Python dispatch of small kernels), so overlap gains little.
With ``actors.processes = "on"`` each actor runs in a spawned process of its own, with one
intra-op thread, and the main process keeps the learner, the event loop, the exporter, the
display and checkpoints (``docs/architecture.md``, decision 1).

What crosses the process boundary, and how:

- the ring slots (``ring.placement = shared``) and the published weights
  (``WeightPublisher(share=True)``, a seqlock) are shared memory, handed to the child once at
  spawn; the child writes a chunk straight into its slot and pulls newer weights before each;
- slot ownership moves over a pipe with small msgpack messages. The main process keeps the
  ring's states: it takes a FREE slot, sends ``["chunk", slot index, league]``, awaits the reply
  on the event loop (``loop.add_reader`` on the pipe and the process sentinel), then commits the
  slot with the policy version the reply names. The reply carries what a thread actor's
  ``chunk_outcome`` reads (wins, draws, losses, finished episode lengths), so episode
  statistics and metrics are counted in the main process's exporter as for threads;
- a stop: the run's shared stop flag, read by the child before every decision step (the chunk
  is given up and its slot aborted, counted);
- a league (``--opponent league``): the :class:`pipeline.league.matchmaking.League` stays in the main
  process and draws for a *mirror* of each actor (its ``GroupedOpponent`` bookkeeping); the
  groups' new opponents (a snapshot's weights included), the environments to restart and the
  per-environment results travel with the chunk messages.

A child that raises replies with its traceback and exits; one that dies (SIGKILL, OOM) is seen
through its sentinel. Either way the loops give the slot back (counted dropped) and restart the
actor as they restart a thread actor. A child whose parent disappears sees its pipe close and
exits after at most one chunk; the main process kills what is left at the end of a run.

This module is the main process's side (:class:`ProcessActor`); the process's side is
``pipeline/run/actor_process_child.py``, and the spawn, the pipe and the error report are
``actors/workers/supervision.py``'s, shared with the Gymnasium env workers.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing import get_context
from typing import Any

import torch

from actors.protocol import WeightSource
from actors.stats import ChunkEpisodes
from actors.step import ChunkInterrupted, ContractViolation
from actors.workers.supervision import (
    ERR,
    RemoteTraceback,
    WorkerFault,
    pack,
    spawn,
    unpack,
    wait_readable,
)
from agents.base import BaseAgent
from agents.grouped import GroupedOpponent
from agents.policy import PolicyAgent
from pipeline.config import PipelineConfig
from pipeline.config.specs import build_agent
from pipeline.league.matchmaking import LATEST, POLICY, League
from pipeline.run.actor_messages import Tensors, results_from_msg, tensor_to_msg
from pipeline.run.actor_process_child import actor_process_main
from pipeline.transport.ring import RolloutRing
from pipeline.transport.slots import RingSlot
from pipeline.transport.weights import WeightPublisher
from sim import ObsLayout

START_TIMEOUT_S = 180.0
"""Time an actor process may take to import torch and build its sim (a loaded 2-core host)."""
STOP_POLL_S = 0.05
"""While a chunk is out, how often the main process looks whether the run stops."""


class ActorProcessError(RuntimeError):
    """An actor process raised (its traceback is the cause) or died."""


class _MirrorStats:
    """What a league reads of a mirrored actor's statistics: the last reply's results."""

    def __init__(self, empty: Tensors):
        self.empty = empty
        self.latest: Tensors = empty

    def take_env_results(self) -> Tensors:
        out, self.latest = self.latest, self.empty
        return out


class ProcessActor:
    """The main process's handle on one sim actor in a spawned process.

    It stands where a ``SimActor`` would in the loops: :meth:`rollout` (blocking, for the sync
    mode's in-turn worker) and :meth:`rollout_async` (awaited on the event loop) hand a WRITING
    slot to the process and return when the chunk is in it; ``policy_version`` is the version
    that wrote it; :meth:`outcome` its episode outcomes. With a league it also offers what
    ``League.before_chunk`` uses of an actor (``opponent``, ``stats``, ``restart_envs``), kept
    here and sent with the next chunk.
    """

    stream = None
    uses_cuda_graph = False
    graph_error = ""
    steps_on_event_loop = True
    """Its chunks run in the process: the loops await them (:meth:`rollout_async`)."""

    def __init__(self, actor_id: int, config: PipelineConfig, seed: int, ring: RolloutRing,
                 publisher: WeightPublisher, stop_flag: torch.Tensor | None, league: League | None,
                 layout: ObsLayout):
        if ring.placement != "shared":
            raise ValueError(f"actor processes write a shared ring, got placement {ring.placement!r}")
        if stop_flag is None or not publisher.shared:
            raise ValueError("actor processes need a shared stop flag and a shared weight publisher")
        self.actor_id = actor_id
        self.device = torch.device("cpu")
        self.num_envs = config.actors.envs_per_actor
        self.rollout_len = config.actors.rollout_len
        self.samples_per_chunk = self.rollout_len * self.num_envs
        self.physics_steps_per_chunk = self.samples_per_chunk * config.sim.physics_steps_per_decision
        self.policy_version = -1
        self.league = league
        self._ring = ring
        self._stop = stop_flag
        self._outcome: tuple[int, int, int, list[int]] = (0, 0, 0, [])
        self._restart: torch.Tensor | None = None
        self._sent: list[tuple[str | None, int]] = []
        """Each group's (player, draw number) as last sent to the process."""
        self.opponent: GroupedOpponent | None = None
        self.stats = _MirrorStats(None)
        """The last reply's per-environment results (a league's; replaced once started)."""
        if league is not None:
            def agent_from_spec(spec: str, num_envs: int, agent_seed: int) -> BaseAgent:
                return build_agent(spec, num_envs, layout, self.device, seed=agent_seed,
                                   action_mode=config.sim.action_mode, sim_config=config.sim).eval()

            self.opponent = league.make_opponent(self.num_envs, agent_from_spec, self.device, seed,
                                                 select_on_device=False)
            self._sent = [(None, 0)] * self.opponent.num_groups
        if self.device.type == "cpu":
            # Build the sim's native kernel (if it is not built yet) here, once, so that the
            # actor processes only load it instead of all compiling it at the same time.
            from sim import native
            native.load()
        self._child = spawn(get_context("spawn"), f"actor-{actor_id}", actor_process_main, {
            "config": config, "actor_id": actor_id, "seed": seed, "blocks": [s.block for s in ring.slots],
            "publisher": publisher, "stop_flag": stop_flag})
        self._started = False

    @property
    def pid(self) -> int | None:
        """The actor process's id."""
        return self._child.pid

    def wait_started(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait for the process's hello (it built its actor); raise what it raised instead."""
        if self._started:
            return
        if not self._child.wait(timeout_s):
            self.close()
            raise ActorProcessError(f"actor process {self.actor_id} did not start within {timeout_s:.0f}s")
        reply = self._receive()
        if reply[0] != "hello":
            self.close()
            raise self._error(reply)
        if self.league is not None:
            self.stats = _MirrorStats(results_from_msg(reply[1]))
        self._started = True

    # ------------------------------------------------------------------ what loops call
    @property
    def league_seat(self) -> ProcessActor:
        """The handle itself: a league draws for its mirror, sent with the next chunk."""
        return self

    def sync_weights(self, publisher: WeightSource) -> int:
        """Nothing to do here: the process pulls newer weights itself before each chunk."""
        return self.policy_version

    def restart_envs(self, env_mask: torch.Tensor) -> None:
        """A league's restart of the masked environments: sent with the next chunk."""
        self._restart = env_mask.to("cpu", dtype=torch.bool, copy=True)

    def check_errors(self) -> None:
        """Nothing deferred: a chunk's errors come back with its reply."""

    def rollout(self, slot: RingSlot, should_stop: Callable[[], bool] | None = None) -> None:
        """Have the process write one chunk into ``slot`` and wait for it (blocking)."""
        self._send_chunk(slot)
        while not self._child.wait(STOP_POLL_S):
            self._check_stop(should_stop)
        self._take_reply(slot)

    async def rollout_async(self, slot: RingSlot, should_stop: Callable[[], bool] | None = None) -> None:
        """:meth:`rollout` awaited on the event loop (readers on the pipe and the sentinel)."""
        self._send_chunk(slot)
        while not self._child.wait(0):
            await wait_readable([self._child], STOP_POLL_S)
            self._check_stop(should_stop)
        self._take_reply(slot)

    def chunk_episodes(self) -> ChunkEpisodes:
        """Wins, draws, losses and finished episode lengths of the last chunk."""
        wins, draws, losses, lengths = self._outcome
        return ChunkEpisodes(wins, draws, losses, torch.tensor(lengths, dtype=torch.int64))

    def close(self) -> None:
        """Stop the process (asked first, killed after a second) and close the pipe."""
        if self._child.process.is_alive():
            self._child.send(pack(["close"]))
        self._child.stop(1.0)

    # ------------------------------------------------------------------ internals
    def _check_stop(self, should_stop: Callable[[], bool] | None) -> None:
        if should_stop is not None and should_stop() and not self._stop[0]:
            self._stop[0] = 1  # every actor process gives its chunk up at its next step

    def _send_chunk(self, slot: RingSlot) -> None:
        if slot is not self._ring.slots[slot.index]:
            raise ValueError(f"actor {self.actor_id}: slot {slot.index} is not a slot of this run's ring")
        if not self._started:
            self.wait_started()
        self._child.conn.send_bytes(pack(["chunk", slot.index, self._league_changes()]))

    def _league_changes(self) -> list[Any] | None:
        """The groups whose opponent changed since the last chunk (a snapshot with its weights),
        and the environments to restart (``League.before_chunk`` ran on this mirror)."""
        if self.league is None or self.opponent is None:
            return None
        groups: list[Any] = []
        for g, (player, draws) in enumerate(self.league.draws_of(self.actor_id)):
            if player is None or (player, draws) == self._sent[g]:
                groups.append(None)
                continue
            # A new draw is a new opponent: a snapshot's weights (just copied into the mirror)
            # go with it; the latest self is the process's own replica, copied there.
            current = self.opponent.current[g]
            weights: Any = None
            if player == LATEST:
                weights = LATEST
            elif current == POLICY:
                agent = self.opponent.candidates[g][POLICY]
                assert isinstance(agent, PolicyAgent)
                weights = {k: tensor_to_msg(v) for k, v in agent.policy.state_dict().items()}
            groups.append([current, weights])
            self._sent[g] = (player, draws)
        restart, self._restart = self._restart, None
        return [groups, None if restart is None else tensor_to_msg(restart)]

    def _receive(self) -> list[Any]:
        try:
            message: list[Any] = unpack(self._child.receive())
            return message
        except WorkerFault:
            how = self._child.exit_description()
            return [ERR, "died", f"actor process {self.actor_id} (pid {self.pid}) {how}", ""]

    def _take_reply(self, slot: RingSlot) -> None:
        reply = self._receive()
        if reply[0] == "done" and reply[1] == slot.index:
            _, _, version, wins, draws, losses, lengths, results = reply
            self.policy_version = int(version)
            self._outcome = (int(wins), int(draws), int(losses), [int(x) for x in lengths])
            if results is not None and self.stats is not None:
                self.stats.latest = results_from_msg(results)
            return
        if reply[0] == "interrupted":
            raise ChunkInterrupted(f"actor {self.actor_id}: stopped")
        raise self._error(reply)

    def _error(self, reply: list[Any]) -> Exception:
        if reply[0] != ERR:
            return ActorProcessError(f"actor process {self.actor_id} sent {reply[0]!r} out of turn")
        _, kind, message, tb = reply
        if kind == "contract":
            return ContractViolation(message)
        exc = ActorProcessError(message if kind == "died" else f"{kind} in actor process {self.actor_id}: {message}")
        if tb:
            exc.__cause__ = RemoteTraceback(tb)  # the run log shows where the process raised
        return exc
