"""Recording selected environments of a :class:`sim.BatchedSim` into replay files.

A :class:`Recorder` watches the sim as its observer (``BatchedSim.observer``). Every decision
step it copies the chosen environments' fighter and missile state, on the sim's device, into
row ``t`` of preallocated buffers (a few small ``index_select`` copies, no host read); only when
the buffers are full (every ``chunk_steps`` decisions) or at :meth:`Recorder.flush` does one copy
bring them to the host. There each environment's rows become frames and events of its current
episode (launches, hits, kills, missiles lost and why, leaving the arena, the time limit; see
:mod:`sim.replay.format`), streamed block by block into the :class:`ReplayWriter` that
``open_episode(env, episode)`` returned for it (None: that episode is not recorded).

Hits are reported per decision step by the sim as counts per side; a recorder attributes them to
the missiles of the scoring side that disappeared in that step nearest to the destroyed target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from sim.batched import BatchedSim
from sim.kernels import END_REASONS, WINNERS, DecisionAccumulators
from sim.replay.format import ReplayWriter, frame_shapes
from sim.state import SimState

STATE_FIELDS = (
    "f_px", "f_py", "f_vx", "f_vy", "f_throttle", "f_rudder", "f_alive", "f_ammo",
    "m_active", "m_px", "m_py", "m_vx", "m_vy", "m_rudder", "m_steps", "episode_index",
    "physics_steps", "decision_steps",
)
"""The :class:`SimState` tensors a recorder copies (environment is their last dimension)."""

OUTCOME_FIELDS = ("done", "winner", "end_reason", "hits")
"""The :class:`DecisionAccumulators` tensors a recorder copies at each decision's end."""

OpenEpisode = Callable[[int, int], ReplayWriter | None]
"""``open_episode(env_index, episode_index)``: the writer for that episode, or None to skip it."""


class Recorder:
    """Records environments ``env_ids`` of ``sim`` (attach before ``sim.reset()``).

    Args:
        sim: the simulator; the recorder becomes its ``observer``.
        env_ids: the environments to record (a few; each is copied every decision step).
        open_episode: called on the host at each recorded environment's episode start.
        chunk_steps: decision steps buffered on the device between copies to the host.
    """

    def __init__(self, sim: BatchedSim, env_ids: Sequence[int], open_episode: OpenEpisode,
                 chunk_steps: int = 64) -> None:
        ids = [int(i) for i in env_ids]
        if not ids or any(not 0 <= i < sim.num_envs for i in ids) or len(set(ids)) != len(ids):
            raise ValueError(f"env_ids must be distinct environments in [0, {sim.num_envs}), got {list(env_ids)}")
        if chunk_steps < 1:
            raise ValueError(f"chunk_steps must be >= 1, got {chunk_steps}")
        if sim.observer is not None:
            raise ValueError("this sim already has an observer")
        self.sim = sim
        self.env_ids = ids
        self.chunk_steps = chunk_steps
        self._idx = torch.tensor(ids, dtype=torch.int64, device=sim.device)
        self._open_episode = open_episode
        state = sim.state
        rows = chunk_steps + 1  # the start of the episode after the last row's end
        self._end = {k: torch.zeros((rows, *getattr(state, k).shape[:-1], len(ids)),
                                    dtype=getattr(state, k).dtype, device=sim.device)
                     for k in STATE_FIELDS}
        acc = sim._acc
        self._out = {k: torch.zeros((rows, *getattr(acc, k).shape[:-1], len(ids)),
                                    dtype=getattr(acc, k).dtype, device=sim.device)
                     for k in OUTCOME_FIELDS}
        self._start = {k: torch.zeros_like(v) for k, v in self._end.items()}
        self._start_valid = torch.zeros(rows, len(ids), dtype=torch.bool, device=sim.device)
        self._row = 0
        self._episodes = [_Episode(sim, env) for env in ids]
        self.replays_written: list[Any] = []
        """Paths of the replays closed so far."""
        sim.observer = self

    # ------------------------------------------------------------------ device side (hot)
    def episodes_started(self, state: SimState, mask: torch.Tensor) -> None:
        r = self._row
        self._start_valid[r].copy_(mask.index_select(0, self._idx))
        for k, buf in self._start.items():
            buf[r].copy_(getattr(state, k).index_select(-1, self._idx))

    def decision_end(self, state: SimState, acc: DecisionAccumulators) -> None:
        r = self._row
        for k, buf in self._end.items():
            buf[r].copy_(getattr(state, k).index_select(-1, self._idx))
        for k, buf in self._out.items():
            buf[r].copy_(getattr(acc, k).index_select(-1, self._idx))
        self._row += 1
        if self._row == self.chunk_steps:
            self.flush()

    # ------------------------------------------------------------------ host side
    def flush(self) -> None:
        """Copy the buffered rows to the host and stream them into the open replays."""
        rows = self._row
        # The row after the last end may hold a start (an auto-reset): carry it over.
        take = rows + 1
        # Copies even on the CPU (where .cpu() would share the buffers the next chunk overwrites).
        start = {k: _host(v[:take]) for k, v in self._start.items()}
        valid = _host(self._start_valid[:take])
        end = {k: _host(v[:rows]) for k, v in self._end.items()}
        out = {k: _host(v[:rows]) for k, v in self._out.items()}
        for j, episode in enumerate(self._episodes):
            for r in range(rows):
                if valid[r, j]:
                    episode.begin(_column(start, r, j), self._open_episode)
                written = episode.add_end(_column(end, r, j), _column(out, r, j))
                if written is not None:
                    self.replays_written.append(written)
            episode.write_block()
        # Keep a start that arrived after the last end as row 0 of the next chunk.
        for v in self._start.values():
            v[0].copy_(v[rows])
        self._start_valid[0].copy_(self._start_valid[rows])
        self._start_valid[1:].zero_()
        self._row = 0

    def close(self) -> None:
        """Flush, give up episodes still running (their temporary files are removed) and
        detach from the sim."""
        self.flush()
        for episode in self._episodes:
            episode.abort()
        if self.sim.observer is self:
            self.sim.observer = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _host(t: torch.Tensor) -> np.ndarray:
    return t.to("cpu", copy=True).numpy()


def _column(arrays: dict[str, np.ndarray], r: int, j: int) -> dict[str, np.ndarray]:
    return {k: v[r][..., j] for k, v in arrays.items()}


class _Episode:
    """Host-side assembly of one environment's current episode."""

    def __init__(self, sim: BatchedSim, env: int) -> None:
        cfg = sim.config
        self.env = env
        self.dt_s = cfg.dt_s
        self.burn_steps = cfg.burn_steps
        self.max_flight_steps = cfg.max_flight_steps
        self.min_speed2 = cfg.missile_min_speed_mps ** 2
        self.half_width = cfg.arena_half_width_m
        self.m = cfg.missiles_per_fighter
        self.shapes = frame_shapes(self.m)
        self.writer: ReplayWriter | None = None
        self.frames: list[dict[str, np.ndarray]] = []
        self.events: list[dict[str, Any]] = []
        self.prev: dict[str, np.ndarray] | None = None
        self.frame_index = 0
        self.ids = np.full((2, self.m), -1, dtype=np.int32)
        self.launches = 0

    def begin(self, raw: dict[str, np.ndarray], open_episode: OpenEpisode) -> None:
        self.abort()
        self.writer = open_episode(self.env, int(raw["episode_index"]))
        self.ids[:] = -1
        self.launches = 0
        self.frame_index = 0
        if self.writer is not None:
            self.prev = self._frame(raw)
            self._append(self.prev)

    def _frame(self, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        steps = raw["m_steps"].astype(np.int64)
        return {
            "t_s": np.float64(int(raw["physics_steps"]) * self.dt_s),
            "decision": np.int32(raw["decision_steps"]),
            "f_x": raw["f_px"], "f_y": raw["f_py"], "f_vx": raw["f_vx"], "f_vy": raw["f_vy"],
            "f_throttle": raw["f_throttle"], "f_rudder": raw["f_rudder"],
            "f_alive": raw["f_alive"], "f_ammo": raw["f_ammo"],
            "m_active": raw["m_active"], "m_id": self.ids.copy(),
            "m_x": raw["m_px"], "m_y": raw["m_py"], "m_vx": raw["m_vx"], "m_vy": raw["m_vy"],
            "m_rudder": raw["m_rudder"], "m_flight_s": steps * self.dt_s,
            "m_burn_left_s": np.maximum(self.burn_steps - steps, 0) * self.dt_s,
            "m_target": np.broadcast_to(np.array([[1], [0]], dtype=np.int8), (2, self.m)),
        }

    def _append(self, frame: dict[str, np.ndarray]) -> None:
        self.frames.append(frame)
        self.frame_index += 1

    def add_end(self, raw: dict[str, np.ndarray], out: dict[str, np.ndarray]) -> Any:
        """One decision's end: a frame and its events; at the episode's end, close the file."""
        if self.writer is None or self.prev is None:
            return None
        prev = self.prev
        cur = self._frame(raw)
        t, f = float(cur["t_s"]), self.frame_index
        events: list[dict[str, Any]] = []

        def event(kind: str, **fields: Any) -> None:
            events.append({"t_s": t, "frame": f, "kind": kind, **fields})

        active, was = cur["m_active"], prev["m_active"]
        restarted = active & was & (cur["m_flight_s"] < prev["m_flight_s"])
        gone = was & (~active | restarted)
        # Fighters destroyed in this decision, and how.
        killed_by_hit = [False, False]
        for s in (0, 1):
            if prev["f_alive"][s] and not cur["f_alive"][s]:
                out_now = abs(float(cur["f_x"][s])) > self.half_width or abs(float(cur["f_y"][s])) > self.half_width
                if out_now:
                    event("out_of_arena", side=s)
                else:
                    killed_by_hit[s] = True
        # Missiles gone: the scoring side's nearest ones to the destroyed target hit.
        for s in (0, 1):
            target = 1 - s
            slots = [int(j) for j in np.flatnonzero(gone[s])]
            hits = int(out["hits"][s]) if killed_by_hit[target] else 0
            by_distance = sorted(slots, key=lambda j: float(np.hypot(
                prev_or_cur(cur, prev, "m_x", s, j, restarted) - cur["f_x"][target],
                prev_or_cur(cur, prev, "m_y", s, j, restarted) - cur["f_y"][target])))
            hit_slots = set(by_distance[:hits])
            for j in slots:
                missile = int(prev["m_id"][s, j])
                if j in hit_slots:
                    reason = "hit"
                    event("hit", side=s, missile=missile, target=target)
                elif restarted[s, j]:
                    reason = "replaced"
                elif not cur["f_alive"][target]:
                    reason = "target_gone"
                elif cur["m_flight_s"][s, j] > self.max_flight_steps * self.dt_s + 1e-9:
                    reason = "max_flight_time"
                else:
                    reason = "too_slow"
                event("missile_lost", side=s, slot=j, missile=missile, reason=reason)
        for s in (0, 1):
            if killed_by_hit[s]:
                event("kill", side=s, by=1 - s)
        # Launches: new numbers for the slots that now hold a new missile.
        launched = active & (~was | restarted)
        for s, j in zip(*np.nonzero(launched), strict=True):
            self.ids[s, j] = self.launches
            event("launch", side=int(s), slot=int(j), missile=self.launches)
            self.launches += 1
        cur["m_id"] = self.ids.copy()
        self._append(cur)
        self.prev = cur
        if not out["done"]:
            self.events.extend(events)
            return None
        reason = END_REASONS[int(out["end_reason"])]
        winner = WINNERS[int(out["winner"])]
        if reason in ("time_limit", "ammo_out"):
            event(reason)
        event("end", winner=winner, end_reason=reason)
        self.events.extend(events)
        self.write_block()
        writer, self.writer = self.writer, None
        self.prev = None
        return writer.close({"winner": winner, "end_reason": reason, "t_s": t,
                             "decisions": int(cur["decision"])})

    def write_block(self) -> None:
        if self.writer is None or not self.frames:
            return
        arrays = {k: np.stack([fr[k] for fr in self.frames]) for k in self.shapes}
        self.writer.write_frames(arrays, self.events)
        self.frames, self.events = [], []

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
        self.writer = None
        self.frames, self.events = [], []
        self.prev = None


def prev_or_cur(cur: dict[str, np.ndarray], prev: dict[str, np.ndarray], name: str, s: int, j: int,
                restarted: np.ndarray) -> float:
    """A gone missile's last position: this frame's, unless a new launch took its slot."""
    return float(prev[name][s, j] if restarted[s, j] else cur[name][s, j])
