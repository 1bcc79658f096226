"""A resumed run takes up its league: the pool and ``league.json`` of the run it continues,
checked against what that run had trained before anything is written or trained."""

from __future__ import annotations

from pathlib import Path

from learner.checkpoint import (
    CHECKPOINTS_DIR,
    CheckpointError,
    read_checkpoint,
    resolve_checkpoint_path,
)
from pipeline.config import ConfigError, PipelineConfig
from pipeline.league.pool import LeaguePool
from pipeline.league.state import StateLimits


def state_limits(run: Path, config: PipelineConfig) -> StateLimits:
    """What ``run``'s ``league.json`` may claim: its newest checkpoint (``latest.pt``, written
    with the file each time) gives the policy version and the agent-steps trained; the actors
    can have played ahead of those by what the ring and the actors held and the chunks lost to
    failures (each game at least one agent-step)."""
    try:
        newest = resolve_checkpoint_path(run / CHECKPOINTS_DIR)
        state = read_checkpoint(newest)
    except CheckpointError as exc:
        raise ConfigError(f"run.resume: {exc}") from None
    extra = state.get("extra")
    steps = extra.get("agent_steps", 0) if isinstance(extra, dict) else 0
    if isinstance(steps, bool) or not isinstance(steps, int):
        steps = 0
    chunks = config.ring.slots + 2 * config.actors.count + config.run.max_actor_failures + 1
    return StateLimits(max_games=max(steps, 0) + chunks * config.samples_per_chunk,
                       max_version=int(state["policy_version"]), checkpoint=newest)


def resume_league(league: LeaguePool, run: Path, config: PipelineConfig, version: int) -> list[str]:
    """Load the league of ``run`` (its ``league`` folder) into ``league``, checked as
    :meth:`LeaguePool.load` says and against :func:`state_limits`, and note the resumed
    learner's progress (its ``version`` of ``ppo.total_updates``), so that the first draws
    after the resume already know whether past selves may play (``league.self_play_from``);
    returns the lines the display should show."""
    notes = league.load(run / "league", limits=state_limits(run, config), sim_config=config.sim)
    league.note_progress(version, config.ppo.total_updates)
    return notes
