"""The end of a run: the final checkpoint, the summary lines and the evaluation, and what the
run leaves behind (:class:`RunResult`, returned by :func:`pipeline.launch.run`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from core.command import squeezed
from learner.checkpoint import CheckpointError
from learner.checkpoint.saving import CheckpointWriteError
from pipeline.config import PipelineConfig
from pipeline.envs.choice import is_sim
from pipeline.evaluation.final import evaluate_final
from pipeline.evaluation.gym import EvaluationError
from pipeline.league.pool import LeagueStateNotWritten
from pipeline.run.display import Display
from pipeline.run.loops import Run
from pipeline.run.progress import RETURN_WINDOW_EPISODES, RunProgress
from pipeline.run.ranks import Job
from pipeline.transport.ring import RingStats


@dataclass
class RunResult:
    """What a finished run leaves behind (returned by :func:`pipeline.launch.run` for tests and
    benchmarks)."""

    exit_code: int
    run_dir: Path
    checkpoint: Path | None
    agent_steps: int
    """Agent-steps trained on in total (a resumed run's earlier part included)."""
    updates: int
    wall_s: float
    """Seconds from the start of the run loop to the end of its work (teardown excluded)."""
    ring: RingStats
    """The ring's final counters."""
    win_history: list[tuple[int, float, int]]
    failures: int
    stop_reason: str
    evaluation: str = ""
    episode_returns: list[tuple[int, float, float]] = field(default_factory=list)
    """(agent-steps, seconds, return) of every finished episode of a Gymnasium env."""
    cuda_graph_actors: int = 0
    """Actors that replayed a captured CUDA graph for their decision step (at the start)."""
    actor_busy_s: float = 0.0
    """Seconds in which at least one actor was writing a chunk."""
    learner_busy_s: float = 0.0
    """Seconds the learner spent in its updates."""


def one_line(exc: BaseException) -> str:
    """An error as one line: an OSError says what and where (``no space left on device``)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror.lower()}{where}"
    return squeezed(exc) or type(exc).__name__


def summarize(job: Job, config: PipelineConfig, the_run: Run, progress: RunProgress, display: Display,
               log: logging.Logger, wall: float, exit_code: int, graph_actors: int,
               error: str) -> RunResult:
    """Final checkpoint, summary lines and evaluation (``wall``: the run's seconds of work).
    They print when the run ended on an error too; a checkpoint that cannot be written (disk
    full, non-finite weights) is reported and the last good one named, and so is an evaluation
    whose env fails (exit 1, the checkpoint kept)."""
    parts = the_run.parts
    try:
        ckpt: Path | None = progress.save_checkpoint()
    except (CheckpointError, OSError) as exc:
        ckpt = progress.checkpoint_path
        good = f"the last good one is {ckpt}" if ckpt else "no checkpoint was written"
        said = isinstance(exc, CheckpointWriteError)  # it names the last good one itself
        display.message(f"final checkpoint {ckpt} written, but its {exc}" if isinstance(exc, LeagueStateNotWritten)
                        else f"final checkpoint not written: {one_line(exc)}" + ("" if said else f" ({good})"))
        log.error("final checkpoint not written: %s", exc)
        exit_code = exit_code or 1
    stopped = bool(the_run.stop_reason) or bool(error)
    actor_busy, learner_busy, both = progress.overlap()
    result = RunResult(
        exit_code=exit_code, run_dir=progress.run_dir, checkpoint=ckpt,
        agent_steps=progress.agent_steps, updates=progress.updates, wall_s=wall,
        ring=parts.ring.stats(), win_history=progress.win_history, failures=progress.failures,
        stop_reason=error or the_run.stop_reason, cuda_graph_actors=graph_actors,
        episode_returns=progress.episode_returns, actor_busy_s=actor_busy, learner_busy_s=learner_busy,
    )
    s = result.ring
    lines = [
        f"{'stopped' if stopped else 'finished'} in {wall:.1f}s: "
        f"{result.agent_steps:,} agent-steps trained ({progress.committed_samples / max(wall, 1e-9):,.0f}/s produced), "
        f"{result.updates} updates, policy version {parts.learner.policy_version}",
        f"samples: produced {s.produced_samples} = consumed {s.consumed_samples} + dropped "
        f"{s.dropped_samples} + in flight {s.in_flight_samples}; slot reuses {s.reuses}; "
        f"actor waits {s.write_wait_s:.2f}s, learner waits {s.read_wait_s:.2f}s",
        f"checkpoint: {ckpt or 'none written'}",
    ]
    if wall > 0:
        measured = progress.host_overlap_is_device_overlap
        if measured and not progress.profiled:  # a --profile trace measured it better
            progress.metrics.set_overlap_ratio(min(both / wall, 1.0))
        label = "busy" if measured else "host enqueue time (the device's overlap: --profile)"
        lines.insert(2, f"{label}: actors {actor_busy:.1f}s, learner {learner_busy:.1f}s, both at once "
                        f"{both:.1f}s ({both / wall:.0%} of wall)")
    if progress.return_history:
        first = next((h for h in progress.return_history if h[2] > 0), progress.return_history[0])
        last_return = progress.return_history[-1]
        lines.append(f"mean return (last {RETURN_WINDOW_EPISODES} episodes): {first[1]:.1f} at "
                     f"{first[0]:,} steps → {last_return[1]:.1f} at {last_return[0]:,} steps")
    if progress.win_history:
        first = next((w for w in progress.win_history if w[2] > 0), progress.win_history[0])
        last = progress.win_history[-1]
        lines.append(f"win rate vs {config.actors.opponent}: {first[1]:.1%} at {first[0]:,} steps "
                     f"→ {last[1]:.1%} at {last[0]:,} steps")
    lines += job.share_lines(progress.trained_samples, s, progress.updates, parts.learner.policy, bool(error))
    for line in lines:
        display.message(line)
    paused = config.run.stop_at < config.run.total_steps
    if exit_code == 0 and not stopped and paused:
        display.message(f"paused at run.stop_steps ({config.run.stop_steps:,} of {config.run.total_steps:,} agent-steps): "
                        f"continue with --resume {progress.run_dir} --set run.stop_steps=0 (or a later stop); no evaluation until the run's end")
    if exit_code == 0 and not stopped and not paused and ckpt is not None and config.run.eval_episodes > 0:
        try:
            result.evaluation = evaluate_final(ckpt, config, progress.run_dir)
        except EvaluationError as exc:  # the env failed in its workers; the training stands
            display.message(f"error: {exc} (the checkpoint above is kept)")
            log.error("evaluation failed: %s", exc)
            result.exit_code = exit_code = 1
        if result.evaluation:
            what = ("against the scripted opponents" if is_sim(config.actors.env)
                    else "with the most likely actions")
            display.message(f"evaluation {what}:\n" + result.evaluation)
    log.info("exit code %d", exit_code)
    return result
