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
from pathlib import Path

import torch
from torch.distributed import DistError

from actors.step import ContractViolation
from learner import NonFiniteError
from learner.checkpoint import CheckpointError, load_checkpoint, resolve_checkpoint_path
from learner.checkpoint.rng import seed_global_generators
from monitoring import Metrics
from monitoring.exporter import Exporter, MetricsAddressError, MetricsPortInUseError, start_exporter
from monitoring.profiling import ProfileSession
from pipeline.config import ConfigError, PipelineConfig, resolve
from pipeline.config.files import to_toml
from pipeline.envs.choice import is_sim
from pipeline.league.resuming import resume_league
from pipeline.run.budget import Budget
from pipeline.run.cuda_steps import step_description
from pipeline.run.display import Display, make_display
from pipeline.run.intake import BatchIntake
from pipeline.run.loops import Run, drive
from pipeline.run.outputs import make_logger, unsaid_log_failure
from pipeline.run.parts import RunParts, build, check_resources
from pipeline.run.progress import RunFailed
from pipeline.run.rank_files import ResumeCopy, parse_rank_config
from pipeline.run.rank_progress import make_progress
from pipeline.run.ranks import Job, open_job
from pipeline.run.rundir import default_run_dir, run_dir_of
from pipeline.run.scheduler import Scheduler
from pipeline.run.signals import StartInterrupted, exit_now, interrupt_start, on_signal
from pipeline.run.summary import RunResult, one_line, summarize


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
                league_notes = resume_league(parts.league, resumed, config,
                                             parts.learner.policy_version)
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
            the_run.request_stop(f"error: {one_line(exc)}")

    try:
        _run_loop(the_run, report, config.run.log_interval_s)
    except (RunFailed, ContractViolation, NonFiniteError, CheckpointError, OSError, DistError) as exc:
        error = one_line(exc)
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
            error = one_line(failure)
            display.message(f"error: {error}")
            log.error("run failed: %s", error)
            exit_code = 1
        display.close()
        if exporter is not None:
            exporter.close()
    result = summarize(job, config, the_run, progress, display, log, end - start, exit_code,
                       graph_actors, error)
    failure = unsaid_log_failure(log, progress.output_failure, error)
    if failure is not None:  # the run log failed, and no line has said so
        display.message(f"error: {one_line(failure)}")
        result.exit_code = result.exit_code or 1
    return result


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
