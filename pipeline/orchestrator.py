"""What both modes share: the chunk budget, one actor chunk, failures, progress, checkpoints.

``pipeline.loop`` drives these pieces either concurrently (async: actor and learner tasks on
one uvloop event loop) or in turn (sync: the baseline). Keeping the pieces here guarantees the
two modes run the same code.
"""

from __future__ import annotations

import collections
import logging
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.components import Components
from pipeline.display import Display, Progress
from pipeline.learner_side import LearnerSide
from pipeline.ring import RingSlot, SlotState

WIN_WINDOW_EPISODES = 500
"""The displayed win rate covers about this many of the most recent episodes."""


class RunFailed(RuntimeError):
    """The run cannot go on (e.g. actors failed more often than ``run.max_actor_failures``)."""


@dataclass
class ChunkResult:
    """Host-side facts about one committed chunk."""

    actor_id: int
    wins: int
    draws: int
    losses: int
    episodes: int


class Orchestrator:
    """Run state shared by the async and sync loops."""

    def __init__(self, parts: Components, metrics: Any, display: Display, log: logging.Logger,
                 run_dir: Path, agent_steps_done: int = 0):
        self.parts = parts
        self.config = parts.config
        self.ring = parts.ring
        self.metrics = metrics
        self.profiled = False
        """True once a ``--profile`` trace measured the overlap (it then owns the metric)."""
        self.display = display
        self.log = log
        self.run_dir = run_dir
        self.learner_side = LearnerSide(parts, metrics)
        spc = self.config.samples_per_chunk
        self.samples_per_chunk = spc
        self.steps_before = agent_steps_done
        remaining = max(self.config.run.total_steps - agent_steps_done, 0)
        self.total_chunks = -(-remaining // spc) if remaining else 0
        self.claimed = 0
        self.committed = 0
        self.failures = 0
        self.failure_log: list[str] = []
        self.stop_requested = False
        self.stop_reason = ""
        self.error: BaseException | None = None
        self.start_time = time.perf_counter()
        self._recent: collections.deque[ChunkResult] = collections.deque()
        self._recent_episodes = 0
        self._last_report = (self.start_time, 0, 0)
        self._last_lag_index = 0
        self._last_checkpoint_t = self.start_time
        self.checkpoint_path: Path | None = None
        self.busy: dict[str, list[tuple[float, float]]] = {"actor": [], "learner": []}
        """Host intervals (perf_counter) of actor chunks and learner updates."""
        self.win_history: list[tuple[int, float, int]] = []
        """(agent-steps, recent win rate, recent episodes) at every report."""

    # ------------------------------------------------------------------ budget
    def claim(self) -> bool:
        """Reserve one chunk of the budget (False when the budget is spent or the run stops)."""
        if self.stop_requested or self.claimed >= self.total_chunks:
            return False
        self.claimed += 1
        return True

    def unclaim(self) -> None:
        """Return a reserved chunk that was not produced (failure or stop)."""
        self.claimed -= 1

    @property
    def agent_steps(self) -> int:
        """Agent-steps produced (committed chunks), including a resumed run's earlier part."""
        return self.steps_before + self.committed * self.samples_per_chunk

    def request_stop(self, reason: str) -> None:
        """Stop producing; waiting actors and learner are woken through the ring."""
        if not self.stop_requested:
            self.stop_requested = True
            self.stop_reason = reason
            self.display.message(f"stopping: {reason}")
            self.ring.close()

    # ------------------------------------------------------------------ one chunk
    def write_chunk(self, actor_id: int, slot: RingSlot) -> None:
        """Blocking part of a chunk: pick up new weights, then roll out into ``slot``."""
        actor = self.parts.actors[actor_id]
        start = time.perf_counter()
        try:
            actor.sync_weights(self.parts.publisher)
            actor.rollout(slot)
        finally:
            self.busy["actor"].append((start, time.perf_counter()))

    def finish_chunk(self, actor_id: int, slot: RingSlot) -> ChunkResult:
        """After the chunk's work completed: check, commit, count (host reads: chunk boundary)."""
        actor = self.parts.actors[actor_id]
        actor.check_errors()
        wins_t, draws_t, losses_t, lengths = actor.stats.chunk_outcomes()
        self.ring.commit(slot, actor.policy_version)
        self.committed += 1
        self.metrics.add_actor_steps(actor_id, actor.samples_per_chunk, actor.physics_steps_per_chunk)
        self.metrics.record_episodes(actor_id, self.config.actors.opponent, wins_t, draws_t, losses_t, lengths)
        result = ChunkResult(actor_id, int(wins_t), int(draws_t), int(losses_t), int(lengths.numel()))
        self._recent.append(result)
        self._recent_episodes += result.episodes
        while self._recent and self._recent_episodes - self._recent[0].episodes >= WIN_WINDOW_EPISODES:
            self._recent_episodes -= self._recent.popleft().episodes
        return result

    def actor_failed(self, actor_id: int, slot: RingSlot | None, exc: BaseException) -> None:
        """Log the traceback, give the half-written slot back (counted dropped), count the
        failure; raise :class:`RunFailed` past the limit. The caller then restarts the actor."""
        stream = getattr(self.parts.actors[actor_id], "stream", None)
        if stream is not None:
            # Kernels enqueued before the exception may still write into the slot: let them
            # finish before the slot can be handed to another actor.
            try:
                stream.synchronize()
            except RuntimeError:
                self.log.exception("actor %d: stream synchronize failed after its error", actor_id)
        if slot is not None and slot.state == SlotState.WRITING:
            self.ring.abort(slot)
            self.metrics.add_dropped_chunks(1, "actor_failure")
        self.unclaim()
        self.failures += 1
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.failure_log.append(f"actor {actor_id}: {type(exc).__name__}: {exc}")
        self.log.error("actor %d failed (failure %d of at most %d):\n%s", actor_id, self.failures,
                       self.config.run.max_actor_failures, tb)
        self.display.message(
            f"actor {actor_id} failed: {type(exc).__name__}: {exc} "
            f"(failure {self.failures}/{self.config.run.max_actor_failures}; traceback in run.log)"
        )
        if self.failures > self.config.run.max_actor_failures:
            raise RunFailed(
                f"actors failed {self.failures} times, more than run.max_actor_failures="
                f"{self.config.run.max_actor_failures}; last: actor {actor_id}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def restart_actor(self, actor_id: int) -> None:
        """Fresh environments, replica, opponent and reward for a failed actor (blocking)."""
        actor = self.parts.restart_actor(actor_id)
        how = ""
        if actor.cuda:
            how = (" stepping with a CUDA graph" if actor.uses_cuda_graph
                   else f" stepping eagerly ({actor.graph_error or 'no CUDA graph asked for'})")
        self.log.info("actor %d restarted (incarnation %d)%s", actor_id, self.parts.incarnations[actor_id], how)

    @property
    def producing_done(self) -> bool:
        """Every chunk of the budget committed (or the run is stopping)."""
        return self.stop_requested or self.committed >= self.total_chunks

    # ------------------------------------------------------------------ learner
    def train(self, slots: list[RingSlot]) -> None:
        """One update on ``slots`` (blocking), and a periodic checkpoint."""
        start = time.perf_counter()
        try:
            self.learner_side.train_on(slots)
        finally:
            self.busy["learner"].append((start, time.perf_counter()))
        if time.perf_counter() - self._last_checkpoint_t >= self.config.run.checkpoint_interval_s:
            self.save_checkpoint()

    def save_checkpoint(self) -> Path:
        """Atomic checkpoint (plus ``latest.pt``) with the run's counters (blocking)."""
        from learner.checkpoint import save_checkpoint

        extra = {
            "agent_steps": self.agent_steps,
            "updates": self.learner_side.updates,
            "config": self.config.to_dict(),
        }
        path = save_checkpoint(self.run_dir / "checkpoints", self.parts.learner, extra,
                               keep_last=self.config.run.keep_checkpoints)
        self.checkpoint_path = path
        self._last_checkpoint_t = time.perf_counter()
        self.log.info("checkpoint %s (policy version %d, %d agent-steps)", path,
                      self.parts.learner.policy_version, self.agent_steps)
        return path

    def overlap(self) -> tuple[float, float, float]:
        """Seconds the actors were busy, the learner was busy, and both at once (host time:
        on CUDA this is enqueue time, the device view comes from a profiler trace)."""
        from monitoring.overlap import intersect, length, union

        actor, learner = union(self.busy["actor"]), union(self.busy["learner"])
        return length(actor), length(learner), length(intersect(actor, learner))

    # ------------------------------------------------------------------ progress
    def recent_outcomes(self) -> tuple[float, float, float, int]:
        """Win, draw and loss rates and the episode count over the recent window."""
        n = self._recent_episodes
        if not n:
            return 0.0, 0.0, 0.0, 0
        wins = sum(r.wins for r in self._recent)
        draws = sum(r.draws for r in self._recent)
        losses = sum(r.losses for r in self._recent)
        return wins / n, draws / n, losses / n, n

    def progress(self, mode: str) -> Progress:
        """A snapshot for the display; rates over the interval since the previous one."""
        now = time.perf_counter()
        t0, steps0, updates0 = self._last_report
        dt = max(now - t0, 1e-9)
        steps, updates = self.agent_steps, self.learner_side.updates
        self._last_report = (now, steps, updates)
        lags = self.learner_side.lags[self._last_lag_index:]
        self._last_lag_index = len(self.learner_side.lags)
        win_rate, draw_rate, loss_rate, episodes = self.recent_outcomes()
        self.win_history.append((steps, win_rate, episodes))
        ring = self.ring.stats()
        return Progress(
            mode=mode, device=str(self.parts.device), elapsed_s=now - self.start_time,
            agent_steps=steps, total_steps=self.config.run.total_steps,
            agent_steps_per_s=(steps - steps0) / dt, updates=updates,
            updates_per_s=(updates - updates0) / dt,
            policy_version=self.parts.learner.policy_version,
            policy_lag_mean=sum(lags) / len(lags) if lags else 0.0,
            win_rate=win_rate, draw_rate=draw_rate, loss_rate=loss_rate, episodes=episodes,
            opponent=self.config.actors.opponent,
            ring_ready=ring.ready, ring_free=ring.free, dropped_chunks=ring.dropped_chunks,
            actor_failures=self.failures,
        )

    def report(self, mode: str, force: bool = False) -> None:
        """Update the display if the interval passed (or ``force``)."""
        if force or time.perf_counter() - self._last_report[0] >= self.config.run.log_interval_s:
            self.display.update(self.progress(mode))
            stats = self.learner_side.last_stats
            if stats:
                keys = ("loss_policy", "loss_value", "entropy", "approx_kl", "clip_fraction",
                        "explained_variance", "learning_rate", "return_mean")
                self.log.info("learner: %s", " ".join(
                    f"{k}={float(stats[k]):.4g}" for k in keys if k in stats
                ))
