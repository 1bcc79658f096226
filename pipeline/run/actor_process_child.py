"""An actor process's side (``pipeline/run/actor_process.py`` is the main process's): build
the actor, then write chunks into ring slots on request, applying the league's decisions that
come with them."""

from __future__ import annotations

import multiprocessing.util
import os
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from actors.sim_actor import SimActor
from actors.step import ChunkInterrupted, ContractViolation
from actors.workers.supervision import (
    ERR,
    error_report,
    follow_parent,
    pack,
    send_quietly,
    unpack,
)
from core.schema import Rollout
from learner import ActionSpec, ActorCritic
from pipeline.config import PipelineConfig
from pipeline.league.matchmaking import LATEST, POLICY, League, copy_weights
from pipeline.run.actor_messages import results_to_msg, tensor_from_msg
from pipeline.run.sim_actors import make_sim_actor, sim_mirror
from pipeline.transport.weights import WeightPublisher
from sim import ObsLayout


def actor_process_main(config: PipelineConfig, actor_id: int, seed: int, blocks: list[torch.Tensor],
                       publisher: WeightPublisher, stop_flag: torch.Tensor, conn: Connection) -> None:
    """An actor process: build the actor, then write chunks into ring slots on request until
    told to close or the pipe closes (the main process is gone); then end the process at once.
    The interpreter's own shutdown (torch's included) takes seconds on a loaded host, the main
    process waits for it at the end of every run, and nothing is left to save here."""
    follow_parent()  # the main process decides when actor processes stop
    torch.set_num_threads(1)  # one core's share: the actors and the learner never oversubscribe
    _serve(config, actor_id, seed, blocks, publisher, stop_flag, conn)
    sys.stdout.flush()
    sys.stderr.flush()
    # What a multiprocessing child's normal exit would still do: release what was registered to
    # be released at exit. torch.compile's first graph opens a tqdm bar, whose lock is a named
    # semaphore; skipped, the resource tracker warns of one "leaked semaphore" per actor process.
    multiprocessing.util._run_finalizers(0)  # type: ignore[attr-defined]
    os._exit(0)


def _serve(config: PipelineConfig, actor_id: int, seed: int, blocks: list[torch.Tensor],
           publisher: WeightPublisher, stop_flag: torch.Tensor, conn: Connection) -> None:
    """Build the actor, say hello, then serve chunk requests until ``close`` or EOF."""
    try:
        torch.manual_seed(config.run.seed * 7919 + actor_id)
        layout = ObsLayout.from_config(config.sim)
        action_spec = ActionSpec.for_sim(config.sim)
        ppo = config.ppo

        mirror = sim_mirror(config.sim) if ppo.mirror else None

        def make_policy() -> ActorCritic:
            return ActorCritic(layout.size, action_spec, ppo.hidden_sizes, ppo.activation,
                               ppo.normalize_obs, ppo.obs_norm_clip, mirror)

        policy = make_policy().eval()
        for p in policy.parameters():
            p.requires_grad_(False)
        league = (League(config.league, Path("."), config.run.seed, make_policy)
                  if config.actors.opponent == "league" else None)
        device = torch.device("cpu")
        actor = make_sim_actor(config, layout, device, actor_id, seed, policy, league)
        actor.sync_weights(publisher)
        slots = [Rollout(actor.spec, actor.spec.views(block), block) for block in blocks]
        empty = results_to_msg(actor.stats.take_env_results()) if league is not None else None
        if config.actors.nice > 0:  # built at the launcher's priority, then below the learner
            # (-1 is decided by the job: 19 for a CPU torchrun rank, 0 for one process)
            os.nice(config.actors.nice)
        if config.actors.sched == "idle":  # decided by the job when auto (pipeline.run.ranks)
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        conn.send_bytes(pack(["hello", empty]))
    except BaseException as exc:
        send_quietly(conn, pack(error_report(type(exc).__name__, str(exc))))
        return
    while True:
        try:
            message = unpack(conn.recv_bytes())
        except (EOFError, OSError):
            return  # the main process is gone
        if message[0] != "chunk":
            return  # "close"
        _, index, changes = message
        try:
            if changes is not None:
                _apply_league(actor, changes)
            actor.sync_weights(publisher)
            actor.rollout(slots[index], should_stop=lambda: bool(stop_flag[0]))
            actor.check_errors()
            wins, draws, losses, lengths = actor.stats.chunk_outcomes()
            results = results_to_msg(actor.stats.take_env_results()) if league is not None else None
            reply = ["done", index, actor.policy_version, int(wins), int(draws), int(losses),
                     lengths.tolist(), results]
        except ChunkInterrupted:
            reply = ["interrupted", index]
        except BaseException as exc:
            kind = "contract" if isinstance(exc, ContractViolation) else type(exc).__name__
            reply = error_report(kind, str(exc))
        if not send_quietly(conn, pack(reply)) or reply[0] == ERR:
            return


def _apply_league(actor: SimActor, changes: list[Any]) -> None:
    """The main process's league decisions: new opponents per group, then restarts."""
    groups, restart = changes
    opponent = actor.opponent
    for g, change in enumerate(groups):
        if change is None:
            continue
        name, weights = change
        if weights == LATEST:  # the learner's latest self: this process's own replica
            copy_weights(opponent.candidates[g][POLICY].policy, actor.policy)
        elif weights is not None:
            state = {k: tensor_from_msg(v) for k, v in weights.items()}
            opponent.candidates[g][POLICY].policy.load_state_dict(state)
        opponent.assign(g, name)
    if restart is not None:
        actor.restart_envs(tensor_from_msg(restart))
