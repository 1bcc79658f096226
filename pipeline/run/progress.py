"""A run's progress: what the loops report (:class:`pipeline.run.hooks.RunHooks`), kept and shown.

Counts agent-steps and updates, keeps the recent win-rate window and the busy intervals of
actors and learner (their overlap), exports metrics, refreshes the display, writes periodic
checkpoints and decides when actor failures stop the run. The loops only call the four hooks.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
import traceback
from pathlib import Path

from actors.cuda_graph import CAPTURE_LOCK
from actors.step import ContractViolation
from monitoring import Metrics, ProfileSession
from monitoring.overlap import intersect, length, union
from pipeline.config import PipelineConfig
from pipeline.config.devices import device_is_cuda
from pipeline.league.pool import SnapshotNotWritten
from pipeline.league.records import LEARNER
from pipeline.run.display import Display, Progress
from pipeline.run.hooks import ChunkOutcome, UpdateReport
from pipeline.run.outputs import log_failure
from pipeline.run.parts import RunParts
from pipeline.run.progress_log import ProgressLog, progress_rows

WIN_WINDOW_EPISODES = 500
"""The displayed win rate covers about this many of the most recent episodes."""
RETURN_WINDOW_EPISODES = 100
"""The displayed mean return (Gymnasium envs) covers this many of the most recent episodes."""


class RunFailed(RuntimeError):
    """The run cannot go on (e.g. actors failed more often than ``run.max_actor_failures``)."""


class RunProgress:
    """The run's record, fed by the loops' hooks.

    Args:
        parts: the run's learner, ring and actors (read for the snapshot and checkpoints).
        metrics: the ``monitoring.Metrics`` facade.
        display: where progress snapshots and messages go.
        log: the run log.
        run_dir: where checkpoints are written.
        agent_steps_before: agent-steps of a resumed run's earlier part.
        mode: ``async`` or ``sync`` (shown in the snapshots).
    """

    def __init__(self, parts: RunParts, metrics: Metrics, display: Display, log: logging.Logger,
                 run_dir: Path, agent_steps_before: int, mode: str):
        self.parts = parts
        self.config: PipelineConfig = parts.config
        self.metrics = metrics
        self.display = display
        self.log = log
        self.run_dir = run_dir
        self.mode = mode
        self.steps_before = agent_steps_before
        self.committed_samples = 0
        """Agent-steps committed to the ring by this run (produced)."""
        self.trained_samples = 0
        """Agent-steps this run trained on (what the budget and a resume count)."""
        self.updates = 0
        self.failures = 0
        self.profile: ProfileSession | None = None
        """A profiling session told of every finished update (``--profile``)."""
        self.profiled = False
        """True once a ``--profile`` trace measured the overlap (it then owns the metric)."""
        self.lags: list[int] = []
        """Policy lag of every consumed chunk."""
        self.last_stats: dict[str, float] = {}
        self.busy: dict[str, list[tuple[float, float]]] = {"actor": [], "learner": []}
        """Host intervals (perf_counter) of actor chunks and learner updates."""
        self.win_history: list[tuple[int, float, int]] = []
        """(agent-steps, recent win rate, recent episodes) at every report."""
        self.checkpoint_path: Path | None = None
        self.start_time = time.perf_counter()
        self._recent: collections.deque[ChunkOutcome] = collections.deque()
        self._recent_returns: collections.deque[float] = collections.deque(maxlen=RETURN_WINDOW_EPISODES)
        self.episode_returns: list[tuple[int, float, float]] = []
        """(agent-steps committed, seconds since the start, return) of every finished episode
        (Gymnasium envs), in the order the chunks were committed."""
        self.return_history: list[tuple[int, float, int]] = []
        """(agent-steps, recent mean return, episodes) at every report (Gymnasium envs)."""
        self._recent_episodes = 0
        self._last_report = (self.start_time, 0, 0)
        self._last_lag_index = 0
        self._last_checkpoint_t = self.start_time
        self._lock = threading.Lock()  # hooks come from the loop thread and the learner's
        self.progress_log = self._open_progress_log(agent_steps_before)
        """``RUN/progress.csv`` (and TensorBoard): one row per opponent at every report."""
        if self.progress_log.dropped_rows:
            display.message(
                f"progress.csv: dropped {self.progress_log.dropped_rows} row(s) past the checkpoint's "
                f"{agent_steps_before:,} agent-steps (training a killed run lost)")
        self.output_failure: OSError | None = None
        """The first failed write of ``progress.csv``, TensorBoard or the run log (a full disk):
        the run stops on it, and no report writes anything after it."""

    def _open_progress_log(self, agent_steps_before: int) -> ProgressLog:
        """``RUN/progress.csv`` (and TensorBoard) for this run, its rows past ``agent_steps_before``
        dropped."""
        return ProgressLog(self.run_dir, self.config.run.tensorboard, agent_steps_before)

    @property
    def agent_steps(self) -> int:
        """Agent-steps trained on, including a resumed run's earlier part. A checkpoint saves
        this count, so a resume produces again what was committed but never trained on."""
        return self.steps_before + self.trained_samples

    # ------------------------------------------------------------------ the hooks
    def on_chunk(self, outcome: ChunkOutcome) -> None:
        """Count a committed chunk, its episodes and the actor's wait for a slot."""
        actor_id = outcome.actor_id
        self.metrics.observe_slot_wait(actor_id, outcome.slot_wait_s)
        self.metrics.add_actor_steps(actor_id, outcome.samples, outcome.physics_steps)
        self.metrics.record_episodes(actor_id, self.config.actors.opponent, outcome.wins,
                                     outcome.draws, outcome.losses, outcome.lengths)
        with self._lock:
            self.committed_samples += outcome.samples
            if outcome.returns is not None:
                returns = outcome.returns.tolist()
                self._recent_returns.extend(returns)
                now = time.perf_counter() - self.start_time
                self.episode_returns.extend((self.committed_samples, now, r) for r in returns)
            self._recent.append(outcome)
            self._recent_episodes += outcome.lengths.numel()
            while (self._recent and self._recent_episodes - self._recent[0].lengths.numel()
                   >= WIN_WINDOW_EPISODES):
                self._recent_episodes -= self._recent.popleft().lengths.numel()

    def on_update(self, report: UpdateReport) -> None:
        """Count an update, export its statistics, step the profiler, checkpoint when due."""
        with self._lock:
            self.updates += 1
            self.trained_samples += report.samples
            self.lags.extend(report.lags)
            self.last_stats = dict(report.stats)
        self.metrics.observe_policy_lag(report.lags)
        self.metrics.add_learner_samples(report.samples)
        self.metrics.observe_update(report.stats, report.policy_version)
        if self.profile is not None:
            with CAPTURE_LOCK:  # its end synchronizes the whole device (see actors.cuda_graph)
                self.profile.step()
        league = self.parts.league
        if league is not None:
            try:
                snapshot = league.maybe_snapshot(self.parts.learner)
            except SnapshotNotWritten as exc:
                self.display.message(f"league: {exc}")
                snapshot = None
            if snapshot is not None:
                self.log.info("league: snapshot %s joins the pool", snapshot)
        if time.perf_counter() - self._last_checkpoint_t >= self.config.run.checkpoint_interval_s:
            self.save_checkpoint()

    def on_busy(self, role: str, start: float, end: float) -> None:
        """Keep a busy interval of ``role`` (for the overlap)."""
        self.busy[role].append((start, end))

    def on_actor_failure(self, actor_id: int, exc: BaseException, dropped_chunk: bool) -> None:
        """Log the traceback and count; raise :class:`RunFailed` past the limit."""
        if dropped_chunk:
            self.metrics.add_dropped_chunks(1, "actor_failure")
        self.failures += 1
        limit = self.config.run.max_actor_failures
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.log.error("actor %d failed (failure %d of at most %d):\n%s", actor_id, self.failures,
                       limit, tb)
        self.display.message(f"actor {actor_id} failed: {type(exc).__name__}: {exc} "
                             f"(failure {self.failures}/{limit}; traceback in run.log)")
        if isinstance(exc, ContractViolation):
            raise RunFailed(f"{exc}; the run stops (a restarted actor would meet it again)") from exc
        if self.failures > limit:
            raise RunFailed(
                f"actors failed {self.failures} times, more than run.max_actor_failures={limit}; "
                f"last: actor {actor_id}: {type(exc).__name__}: {exc}"
            ) from exc
        self.log.info("actor %d restarting on fresh environments", actor_id)

    def on_interrupted_chunk(self) -> None:
        """Count a chunk given up half-way by a stop (its slot was aborted)."""
        self.metrics.add_dropped_chunks(1, "interrupted")

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self) -> Path:
        """Atomic checkpoint (plus ``latest.pt``) with the run's counters (blocking)."""
        from learner.checkpoint import save_checkpoint

        learner = self.parts.learner
        extra = {"agent_steps": self.agent_steps, "updates": self.updates,
                 "config": self.config.to_dict()}
        path = save_checkpoint(self.run_dir / "checkpoints", learner, extra,
                               keep_last=self.config.run.keep_checkpoints)
        self.checkpoint_path = path  # written, whatever becomes of the league's state below
        self._last_checkpoint_t = time.perf_counter()
        if self.parts.league is not None:
            self.parts.league.save()
        self.log.info("checkpoint %s (policy version %d, %d agent-steps)", path,
                      learner.policy_version, self.agent_steps)
        return path

    def _league_standing(self) -> tuple[dict[str, tuple[float, float, float, int]] | None, float | None]:
        """With a league: each opponent's recent (win, draw, loss) rates and games so far, and
        the learner's rating (as last refit); (None, None) without one."""
        league = self.parts.league
        if league is None:
            return None, None
        return league.standing() or None, league.ratings.get(LEARNER)

    # ------------------------------------------------------------------ reading it
    def overlap(self) -> tuple[float, float, float]:
        """Seconds the actors were busy, the learner was busy, and both at once (host time:
        on CUDA this is enqueue time, the device view comes from a profiler trace)."""
        actor, learner = union(self.busy["actor"]), union(self.busy["learner"])
        return length(actor), length(learner), length(intersect(actor, learner))

    def recent_outcomes(self) -> tuple[float, float, float, int]:
        """Win, draw and loss rates and the episode count over the recent window."""
        with self._lock:
            n = self._recent_episodes
            if not n:
                return 0.0, 0.0, 0.0, 0
            wins = sum(r.wins for r in self._recent)
            draws = sum(r.draws for r in self._recent)
            losses = sum(r.losses for r in self._recent)
        return wins / n, draws / n, losses / n, n

    def snapshot(self) -> Progress:
        """A snapshot for the display; rates over the interval since the previous one."""
        now = time.perf_counter()
        t0, steps0, updates0 = self._last_report
        dt = max(now - t0, 1e-9)
        steps, updates = self.agent_steps, self.updates
        self._last_report = (now, steps, updates)
        lags = self.lags[self._last_lag_index:]
        self._last_lag_index += len(lags)
        win_rate, draw_rate, loss_rate, episodes = self.recent_outcomes()
        return_mean = None
        if self.parts.env_factory is not None:
            with self._lock:
                returns = list(self._recent_returns)
            return_mean = sum(returns) / len(returns) if returns else 0.0
            episodes = len(returns)
            self.return_history.append((steps, return_mean, episodes))
        else:
            self.win_history.append((steps, win_rate, episodes))
        ring = self.parts.ring.stats()
        league = ""
        if self.parts.league is not None:
            self.parts.league.refit()
            self.metrics.set_league(self.parts.league.ratings, self.parts.league.games())
            league = self.parts.league.summary()
        return Progress(
            mode=self.mode, device=str(self.parts.device), elapsed_s=now - self.start_time,
            agent_steps=steps, total_steps=self.config.run.total_steps,
            agent_steps_per_s=(steps - steps0) / dt, updates=updates,
            updates_per_s=(updates - updates0) / dt,
            policy_version=self.parts.learner.policy_version,
            policy_lag_mean=sum(lags) / len(lags) if lags else 0.0,
            win_rate=win_rate, draw_rate=draw_rate, loss_rate=loss_rate, episodes=episodes,
            opponent=self.config.actors.opponent,
            ring_ready=ring.ready, ring_free=ring.free, dropped_chunks=ring.dropped_chunks,
            actor_failures=self.failures, return_mean=return_mean, league=league,
        )

    @property
    def host_overlap_is_device_overlap(self) -> bool:
        """Whether the host busy intervals measure the work itself: on a CUDA device they time
        the enqueue of a chunk's kernels (a graph replay returns at once), not the kernels, so
        there only a ``--profile`` trace measures the overlap (on one H200 the host intervals
        gave 14 % where the trace of the same launch gave 69 %: bench/RESULTS.md)."""
        return not device_is_cuda(str(self.parts.device))

    def _live_overlap(self) -> None:
        """Export the share of wall time so far in which actor and learner work ran at once,
        from the host busy intervals, so ``midrange_overlap_ratio`` is live in every CPU run; a
        ``--profile`` trace's device figure, once measured, is kept instead, and on a CUDA
        device only that figure is exported."""
        if self.profiled or getattr(self.profile, "report", None) is not None:
            return
        if not self.host_overlap_is_device_overlap:
            return
        wall = time.perf_counter() - self.start_time
        if wall > 0:
            self.metrics.set_overlap_ratio(min(self.overlap()[2] / wall, 1.0))

    def report(self) -> None:
        """Refresh the display, append to ``progress.csv`` and log the learner's latest
        statistics. A failed write of these files (or of the run log since the last report)
        is kept in :attr:`output_failure` and raised; after it a report does nothing."""
        if self.output_failure is not None:
            return
        try:
            snap = self.snapshot()
            self._live_overlap()
            self.display.update(snap)
            stats = self.last_stats
            self.progress_log.append(progress_rows(snap, stats, *self._league_standing()))
            if stats:
                keys: tuple[str, ...] = ("loss_policy", "loss_value", "entropy", "approx_kl", "clip_fraction",
                                         "explained_variance", "learning_rate", "return_mean")
                if stats.get("teacher_coef", 0.0) > 0:
                    keys += ("teacher_coef", "loss_teacher", "teacher_asked")
                self.log.info("learner: %s", " ".join(f"{k}={stats[k]:.4g}" for k in keys if k in stats))
            failure = log_failure(self.log)
            if failure is not None:
                raise failure
        except OSError as exc:
            self.output_failure = exc
            raise

    def finish(self) -> OSError | None:
        """The last report, then the ``--profile`` trace (named on the display); the first
        write of the run's files that failed (a full disk), in the run or here, or None."""
        with contextlib.suppress(OSError):  # kept in output_failure
            self.report()
        self.progress_log.close()
        failure = self.output_failure
        try:
            self._close_profile()
        except OSError as exc:
            failure = failure or exc
        return failure

    def _close_profile(self) -> None:
        profile = self.profile
        if profile is None:
            return
        profile.close()
        if profile.report is not None:
            r = profile.report
            self.display.message(
                f"profile: {profile.trace_path} · actor/learner overlap "
                f"{r['overlap_fraction']:.0%} of wall time (python -m monitoring.overlap "
                f"{profile.trace_path})")
        self.profiled = profile.report is not None
