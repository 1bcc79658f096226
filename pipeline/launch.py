"""``python -m pipeline.launch``: train a policy with async actors and a PPO learner.

Exit codes: 0 finished or stopped cleanly (SIGINT/SIGTERM: checkpoint saved), 1 the run failed
(e.g. actors kept crashing), 2 a bad option or config value (the message names it), 130 a second
interrupt (exit at once; the last checkpoint stays loadable), 143 SIGTERM before the run started.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.distributed import DistError

from actors.step import ContractViolation
from core.command import squeezed
from learner import NonFiniteError
from learner.checkpoint import CheckpointError, load_checkpoint, resolve_checkpoint_path
from learner.checkpoint.rng import seed_global_generators
from learner.checkpoint.saving import CheckpointWriteError
from monitoring import Metrics
from monitoring.exporter import Exporter, MetricsAddressError, MetricsPortInUseError, start_exporter
from monitoring.profiling import ProfileSession
from pipeline.config import ConfigError, PipelineConfig, resolve
from pipeline.config.files import to_toml
from pipeline.envs.choice import is_sim
from pipeline.evaluation.final import evaluate_final
from pipeline.evaluation.gym import EvaluationError
from pipeline.league.pool import LeagueStateNotWritten
from pipeline.league.resuming import resume_league
from pipeline.run.budget import Budget
from pipeline.run.cuda_steps import step_description
from pipeline.run.display import Display, make_display
from pipeline.run.intake import BatchIntake
from pipeline.run.loops import Run, drive
from pipeline.run.outputs import log_failure, make_logger
from pipeline.run.parts import RunParts, build, check_resources
from pipeline.run.progress import RETURN_WINDOW_EPISODES, RunFailed, RunProgress
from pipeline.run.rank_files import ResumeCopy, parse_rank_config
from pipeline.run.rank_progress import make_progress
from pipeline.run.ranks import Job, open_job
from pipeline.run.rundir import default_run_dir, run_dir_of
from pipeline.run.scheduler import Scheduler
from pipeline.run.signals import StartInterrupted, exit_now, interrupt_start, on_signal
from pipeline.transport.ring import RingStats


@dataclass
class RunResult:
    """What a finished run leaves behind (returned by :func:`run` for tests and benchmarks)."""

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


def run(config: PipelineConfig, resume_from: Path | None = None) -> RunResult:
    """Run a resolved config to the end; raises ConfigError for bad values found late.

    Every input (plug-in specs, the checkpoint to resume, the metrics port, the memory it all
    needs) is checked before anything is written; then the run directory is claimed. Under
    ``torchrun`` each rank runs this, as one rank of a job (:mod:`pipeline.run.ranks`);
    ``resume_from`` is where a rank reads what ``run.resume`` names when its machine lacks the
    run (its copy of rank 0's, :mod:`pipeline.run.rank_files`).
    """
    with open_job(config.run.device) as job:
        return _run_rank(job, config, resume_from)


def _run_rank(job: Job, config: PipelineConfig, resume_from: Path | None) -> RunResult:
    """:func:`run` as rank ``job.rank`` of ``job``."""
    config = job.job_config(config)
    text = config_text(config) + job.config_note()
    path = job.agree_on_start(text, Path(config.run.run_dir) if config.run.run_dir else default_run_dir())
    config = job.rank_config(config)
    if config.run.device == "cpu":
        # Several actor threads share few cores: one intra-op thread each avoids oversubscription.
        torch.set_num_threads(1)
    seed_global_generators(config.run.seed)
    check_resources(config)
    metrics = Metrics()
    parts = build(config, metrics, path)
    try:  # from here a failure must stop what build() started (actor processes, env workers)
        steps_done = 0
        league_notes: list[str] = []
        source = str(resume_from) if resume_from is not None else config.run.resume
        resumed = run_dir_of(source) if source else None
        fresh = resumed is not None and not any((resumed / "checkpoints").glob("*.pt"))
        if source and not fresh:
            try:
                ckpt = resolve_checkpoint_path(source)
                extra = load_checkpoint(ckpt, parts.learner)
            except ValueError as exc:
                raise ConfigError(f"run.resume: {exc}") from None
            if parts.league is not None and resumed is not None:
                league_notes = resume_league(parts.league, resumed, config)
            steps_done = int(extra.get("agent_steps", 0))
            if 0 < config.run.stop_steps <= steps_done:
                raise ConfigError(f"run.stop_steps ({config.run.stop_steps:,}) is already reached: {ckpt} "
                                  f"has trained {steps_done:,} agent-steps (raise it, or 0 to train to "
                                  f"run.total_steps)")
            job.after_resume(config.run.seed, steps_done)
            parts.publisher.publish(parts.learner.policy, parts.learner.policy_version)
            for actor in parts.actors:
                actor.sync_weights(parts.publisher)
        metrics.watch_ring(parts.ring)
        exporter = None
        if config.run.metrics_port >= 0:
            try:
                exporter = start_exporter(metrics, addr=config.run.metrics_addr,
                                          port=config.run.metrics_port, port_fallback=True)
            except MetricsAddressError as exc:
                raise ConfigError(f"run.metrics_addr (--metrics-addr) {exc.strerror}") from None
            except (MetricsPortInUseError, OSError) as exc:
                raise ConfigError(f"run.metrics_port: {exc.strerror or exc}") from None
        try:
            owned = job.claim_run_dir(path, text,
                                      resuming_here=resumed is not None and resume_from is None
                                      and resumed.resolve() == path.resolve())
        except BaseException:
            if exporter is not None:
                exporter.close()
            raise
    except BaseException:
        parts.close()
        raise
    started = False
    try:
        try:
            log = make_logger(path, job.log_name)
        except OSError as exc:
            raise ConfigError(f"cannot write {exc.filename}: {(exc.strerror or str(exc)).lower()}") from None
        display = make_display(config.run.display, log)
        for message in owned.messages:
            display.message(f"run directory: {message}")
        if fresh:
            display.message(f"run directory: {resumed} has no checkpoint yet: starting it from the beginning")
        for note in league_notes:
            display.message(f"league: {note}")
        if exporter is not None:
            taken = "" if exporter.port == exporter.requested_port or not config.run.metrics_port else (
                f" (port {config.run.metrics_port} was busy)")
            display.message(f"metrics: {exporter.url}{taken}")
            if exporter.open_to_network:
                display.message(f"warning: metrics are exposed to the network: --metrics-addr "
                                f"{exporter.addr} listens beyond this machine (127.0.0.1 keeps them on it)")
        started = True
        return _train(job, config, parts, metrics, display, log, path, steps_done, exporter)
    finally:
        parts.close()  # a Gymnasium env's worker processes
        owned.release(keep=started)
        # Until here (the teardown included) a signal after the run's loop exits at once.
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL if sig == signal.SIGTERM else signal.default_int_handler)


def config_text(config: PipelineConfig) -> str:
    """The run's ``config.toml``: every value it uses, the derived ones as a comment."""
    return to_toml(config.to_dict()) + (
        f"# derived: ppo.total_updates = {config.ppo.total_updates} (from run.total_steps), "
        f"ppo.seed = {config.ppo.seed} (from run.seed)\n")


def _train(job: Job, config: PipelineConfig, parts: RunParts, metrics: Metrics, display: Display,
           log: logging.Logger, run_dir: Path, steps_done: int, exporter: Exporter | None) -> RunResult:
    """The run itself, in a claimed run directory; then the summary."""
    mode = "sync" if config.run.sync else "async"
    graph_actors = sum(a.uses_cuda_graph for a in parts.actors)
    if parts.device.type == "cuda":
        display.message(step_description(config, parts, graph_actors))
    display.message(
        f"run {run_dir} · {mode} · {config.run.device} · {config.actors.count} actor "
        f"{'processes' if config.actor_processes else 'threads'} × "
        f"{config.actors.envs_per_actor} envs × {config.actors.rollout_len} steps · ring "
        f"{config.ring.slots} slots ({parts.ring.placement}) · "
        + (f"opponent {config.actors.opponent} · reward {config.actors.reward}" if is_sim(config.actors.env)
           else f"env {config.actors.env} ({config.actors.workers_per_actor} workers per actor)")
        + f" · {config.run.total_steps:,} agent-steps"
        + (f" · stopping at {config.run.stop_steps:,}" if config.run.stop_steps else "")
        + (f" · resumed at {steps_done:,}" if steps_done else "")
    )
    progress = make_progress(job, parts, metrics, display, log, run_dir, steps_done, mode)
    remaining = max(config.run.stop_at - steps_done, 0)
    budget = Budget(job.share_of_chunks(-(-remaining // config.samples_per_chunk)))
    the_run = Run(parts, BatchIntake(parts, metrics), budget,
                  Scheduler(progress, config.run.sync, config.run.actor_threads), progress,
                  lockstep=job.lockstep(parts.league))
    if job.distributed:
        display.message(job.describe(budget.total_chunks, config.samples_per_chunk))
    if config.run.profile > 0:
        # Constructed here, in the main thread, where the profiler must first start.
        progress.profile = ProfileSession(run_dir, iterations=config.run.profile, warmup=1,
                                          metrics=metrics)
    start = time.perf_counter()
    exit_code = 0
    error = ""

    def report() -> None:
        try:
            progress.report()
        except OSError as exc:  # a full disk: stop, then the final checkpoint and summary
            the_run.request_stop(f"error: {_one_line(exc)}")

    try:
        _run_loop(the_run, report, config.run.log_interval_s)
    except (RunFailed, ContractViolation, NonFiniteError, CheckpointError, OSError, DistError) as exc:
        error = _one_line(exc)
        display.message(f"error: {error}")
        log.error("run failed: %s", error, exc_info=not isinstance(exc, RunFailed))
        exit_code = 1
    finally:
        # The run's wall time ends with its work, before the teardown below (the metrics
        # server's shutdown alone waits up to half a second for its poll loop).
        end = time.perf_counter()
        if the_run.stop_reason and not error and progress.output_failure is None:
            display.message(f"stopping: {the_run.stop_reason}")
        failure = progress.finish()
        if failure is not None and not error:
            error = _one_line(failure)
            display.message(f"error: {error}")
            log.error("run failed: %s", error)
            exit_code = 1
        display.close()
        if exporter is not None:
            exporter.close()
    result = _summarize(job, config, the_run, progress, display, log, end - start, exit_code,
                        graph_actors, error)
    failure = log_failure(log)
    if failure is not None and progress.output_failure is None:  # the summary met a full disk
        display.message(f"error: {_one_line(failure)}")
        result.exit_code = result.exit_code or 1
    return result


def _one_line(exc: BaseException) -> str:
    """An error as one line: an OSError says what and where (``no space left on device``)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror.lower()}{where}"
    return squeezed(exc) or type(exc).__name__


def _run_loop(the_run: Run, report: Callable[[], None], interval_s: float) -> None:
    """Drive the loops on a fresh uvloop event loop, SIGINT/SIGTERM handled on it: the first
    stops the run gracefully (checkpoint, exit 0), a second exits at once (every saved file is
    written atomically, so the last checkpoint stays loadable). The handlers run on the loop's
    thread between callbacks, never inside a lock the interrupted code holds."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, on_signal, the_run, sig)
        try:
            await drive(the_run, report, interval_s)
        finally:
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
                    # From here on (final checkpoint, summary, evaluation) an interrupt means "now".
                    signal.signal(sig, exit_now)

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        asyncio.run(main())
        return
    uvloop.run(main())


def _summarize(job: Job, config: PipelineConfig, the_run: Run, progress: RunProgress, display: Display,
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
                        else f"final checkpoint not written: {_one_line(exc)}" + ("" if said else f" ({good})"))
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    if threading.current_thread() is threading.main_thread():
        # Until the run loop takes the signal over: SIGTERM during the start unwinds as Ctrl-C
        # does, so the processes started so far are stopped and their shared blocks unlinked.
        signal.signal(signal.SIGTERM, interrupt_start)
    copy: ResumeCopy | None = None
    try:
        data, copy = parse_rank_config(argv)
        return run(resolve(data), resume_from=copy.resume_from if copy is not None else None).exit_code
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StartInterrupted as exc:
        print(f"error: {exc} during the start; nothing was trained", file=sys.stderr)
        return 128 + exc.signum
    finally:
        if copy is not None:
            copy.remove()


if __name__ == "__main__":
    exit_code = main()
    # The interpreter's last collections would walk every object of the run (seconds on a
    # loaded host, after the run has ended): they skip what is frozen.
    gc.freeze()
    sys.exit(exit_code)
