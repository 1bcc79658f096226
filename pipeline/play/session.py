"""One fight on the server: the project's simulator (one environment) stepped in real time,
its two seats, the score across rounds, and the frames the page draws.

A step is :data:`PLAY_STEP_S` of sim time (one physics step, and one decision of a person at
the keyboard); agents still decide as often in sim time as they were trained to
(:class:`pipeline.play.seats.AgentSeat` holds each decision). The page receives a frame after
every step, so it hears of a key press within one step.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from pipeline.evaluation.entrants import trained_sim_config
from pipeline.play.seats import HUMAN, SIDES, AgentSeat, HumanSeat, Seat, build_seat
from sim import BatchedSim, SimConfig
from sim.kernels import END_REASONS, WINNERS, DecisionAccumulators
from sim.state import SimState

PLAY_STEP_S = 0.05
"""Sim seconds per step of a played fight: 20 frames a second, the page's input answered
within one. A physics step of the simulator at this ``dt_s`` (the default is 0.1 s)."""

DEFAULT_OPPONENT = "ace2"
"""The agent in the blue seat when none is named: the strongest champion that ships with the
package (``agents/champions``), as in ``Midrange-v0``."""

SCENARIOS = ("random", "head_on")
"""The simulator's starting scenarios (``SimConfig.scenario``)."""

ROUND_GAP_S = 3.0
"""Wall seconds the last frame of a round stays on screen before the next round starts."""



@dataclass(frozen=True)
class Lineup:
    """What a fight is made of: both seats, the simulator's configuration and the scenario.
    Built (agents loaded, checkpoints read) before it replaces a running fight."""

    specs: tuple[str, str]
    seats: tuple[Seat, Seat]
    config: SimConfig
    scenario: str


def play_config(base: SimConfig, scenario: str, max_time_s: float | None = None) -> SimConfig:
    """``base`` (the simulator the agents were trained on) stepped :data:`PLAY_STEP_S` at a
    time, starting from ``scenario``; a ``ValueError`` names an unknown scenario."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}: expected one of {', '.join(SCENARIOS)}")
    changes: dict[str, Any] = {"dt_s": PLAY_STEP_S, "substeps": 1, "time_scale": 1.0, "scenario": scenario}
    if max_time_s is not None:
        changes["max_time_s"] = max_time_s
    return base.replace(**changes)


def build_lineup(red: str, blue: str, scenario: str, seed: int = 0,
                 max_time_s: float | None = None) -> Lineup:
    """Both seats for a fight of ``red`` against ``blue`` (``human`` or any agent spec) on the
    simulator the checkpoints among them were trained on. A bad spec, a checkpoint that does
    not load or an unknown scenario raises ``ValueError`` (one line naming it)."""
    specs = (red.strip() if isinstance(red, str) else red, blue.strip() if isinstance(blue, str) else blue)
    for side, spec in zip(SIDES, specs, strict=True):
        if not isinstance(spec, str) or not spec:
            raise ValueError(f"{side} seat: agent spec must be a non-empty string, got {spec!r}")
    base = trained_sim_config([s for s in specs if s != HUMAN])
    config = play_config(base, scenario, max_time_s)
    decide_every = max(1, round(base.decision_dt_s / config.dt_s))
    seats = tuple(build_seat(spec, side, config, decide_every, seed) for side, spec in enumerate(specs))
    return Lineup(specs, (seats[0], seats[1]), config, scenario)


class _FrameTaker:
    """The simulator's observer: keeps the state of the step's end (before an ended round's
    reset) and of each new round's start."""

    def __init__(self) -> None:
        self.ended: SimState | None = None
        self.started: SimState | None = None

    def decision_end(self, state: SimState, acc: DecisionAccumulators) -> None:
        self.ended = state.clone()

    def episodes_started(self, state: SimState, mask: torch.Tensor) -> None:
        if bool(mask[0]):
            self.started = state.clone()


@dataclass
class Score:
    """Rounds won by each side and drawn."""

    red: int = 0
    blue: int = 0
    draws: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"red": self.red, "blue": self.blue, "draws": self.draws, "rounds": self.red + self.blue + self.draws}


@dataclass
class SessionView:
    """What the spacetime hook sees of the fight (``pipeline.play.spacetime.payload``): the
    simulator's state of the frame shown (one environment), its configuration and the time."""

    state: SimState
    config: SimConfig
    t: float


class Session:
    """One fight between two seats, stepped by the server's clock (:meth:`step`)."""

    def __init__(self, lineup: Lineup, seed: int = 0) -> None:
        self.seed = seed
        self.paused = False
        self.time_scale = 1.0
        self.steps = 0
        """Steps taken since the server started (all rounds, all lineups)."""
        self.sim_s = 0.0
        """Sim seconds stepped since the server started."""
        self.round_index = 0
        self.result: dict[str, Any] | None = None
        """The last round's result while its final frame is shown, else None."""
        self._ended_at = 0.0
        self._events: list[dict[str, Any]] = []
        self._queued: dict[int, tuple[str, Seat]] = {}
        self.apply(lineup)

    # ------------------------------------------------------------------ lineup

    def apply(self, lineup: Lineup) -> None:
        """Start a new fight with ``lineup`` (score back to zero)."""
        self.lineup = lineup
        self.score = Score()
        self.round_index = 0
        self._taker = _FrameTaker()
        self.sim = BatchedSim(1, lineup.config, device="cpu", seed=self.seed)
        self.sim.observer = self._taker
        self._obs = self.sim.reset().clone()
        self._start_round()

    def queue_seat(self, side: int, spec: str, seat: Seat) -> None:
        """Let ``seat`` (built from ``spec``) fly side ``side`` from the next round on."""
        self._queued[side] = (spec, seat)

    def restart(self) -> None:
        """Start the round again from the next starting position (the score is kept)."""
        self.sim.reseed(self.seed + self.round_index + 1)
        self._obs = self.sim.reset().clone()
        self._start_round()

    def _start_round(self) -> None:
        if self._queued:
            specs, seats = list(self.lineup.specs), list(self.lineup.seats)
            for side, (spec, seat) in sorted(self._queued.items()):
                specs[side], seats[side] = spec, seat
                self._events.append({"kind": "seat", "side": SIDES[side], "spec": spec, "t": 0.0})
            self._queued = {}
            self.lineup = dataclasses.replace(self.lineup, specs=(specs[0], specs[1]), seats=(seats[0], seats[1]))
        self.round_index += 1
        self.result = None
        self._shown = self._taker.started if self._taker.started is not None else self.sim.state.clone()
        self._t = 0.0
        self._round_steps = 0
        self._missiles_seen: set[str] = set()
        for seat in self.lineup.seats:
            seat.reset()
        self._events.append({"kind": "round", "round": self.round_index, "t": 0.0})

    @property
    def seats(self) -> tuple[Seat, Seat]:
        return self.lineup.seats

    def human_seat(self, side: str) -> HumanSeat | None:
        """The seat ``side`` if a person flies it."""
        seat = self.lineup.seats[SIDES.index(side)]
        return seat if isinstance(seat, HumanSeat) else None

    # ------------------------------------------------------------------ stepping

    def step(self) -> None:
        """Advance the fight by one step, or after a round's end, once its final frame has
        been shown for :data:`ROUND_GAP_S`, start the next round."""
        if self.paused:
            return
        if self.result is not None:
            if time.monotonic() - self._ended_at >= ROUND_GAP_S:
                self._start_round()
            return
        mode = self.lineup.config.action_mode
        actions = torch.stack([seat.action(self._obs[0, side], self._round_steps, mode)
                               for side, seat in enumerate(self.lineup.seats)]).unsqueeze(0)
        if mode == "discrete":
            actions = actions.to(torch.int64)
        out = self.sim.step(actions)
        self._obs = out.obs.clone()
        self.steps += 1
        self._round_steps += 1
        dt = self.lineup.config.decision_dt_s
        self.sim_s += dt
        self._t += dt
        assert self._taker.ended is not None
        self._shown = self._taker.ended
        self._note_events(out.launches[0].tolist(), out.hits[0].tolist())
        if bool(out.done[0]):
            winner = WINNERS[int(out.winner[0])]
            reason = END_REASONS[int(out.end_reason[0])]
            setattr(self.score, "draws" if winner == "draw" else winner,
                    getattr(self.score, "draws" if winner == "draw" else winner) + 1)
            self.result = {"type": "result", "round": self.round_index, "winner": winner, "reason": reason,
                           "t": round(self._t, 3), "score": self.score.as_dict()}
            self._events.append({"kind": "end", "winner": winner, "reason": reason, "t": round(self._t, 3)})
            self._ended_at = time.monotonic()

    def _note_events(self, launches: list[int], hits: list[int]) -> None:
        t = round(self._t, 3)
        for side, name in enumerate(SIDES):
            for _ in range(int(launches[side])):
                self._events.append({"kind": "launch", "side": name, "t": t})
            for _ in range(int(hits[side])):
                self._events.append({"kind": "hit", "side": name, "t": t})
        active = self._shown.m_active[..., 0].tolist()
        for side, name in enumerate(SIDES):
            for slot, on in enumerate(active[side]):
                key = f"{name}-{slot}"
                if on:
                    self._missiles_seen.add(key)
                elif key in self._missiles_seen:
                    self._missiles_seen.discard(key)
                    self._events.append({"kind": "gone", "side": name, "id": key, "t": t})

    def take_events(self) -> list[dict[str, Any]]:
        """The events since the last call (launches, hits, missiles gone, round starts and ends)."""
        events, self._events = self._events, []
        return events

    # ------------------------------------------------------------------ frames

    def view(self) -> SessionView:
        """The frame shown, for the spacetime hook."""
        return SessionView(self._shown, self.lineup.config, self._t)

    def frame(self) -> dict[str, Any]:
        """The ``state`` message's fight part: time, fighters, missiles, score and seats."""
        s, cfg = self._shown, self.lineup.config
        fighters = []
        px, py = s.f_px[:, 0].tolist(), s.f_py[:, 0].tolist()
        vx, vy = s.f_vx[:, 0].tolist(), s.f_vy[:, 0].tolist()
        alive, ammo, since = s.f_alive[:, 0].tolist(), s.f_ammo[:, 0].tolist(), s.f_since_launch[:, 0].tolist()
        for side, name in enumerate(SIDES):
            fighters.append({
                "side": name, "x": round(px[side], 2), "y": round(py[side], 2),
                "heading": round(math.atan2(vy[side], vx[side]), 5), "speed": round(math.hypot(vx[side], vy[side]), 2),
                "alive": bool(alive[side]), "missiles_left": int(ammo[side]),
                "fire_ready": bool(alive[side]) and ammo[side] > 0 and since[side] >= cfg.cooldown_steps,
            })
        missiles = []
        active = s.m_active[..., 0].tolist()
        mx, my = s.m_px[..., 0].tolist(), s.m_py[..., 0].tolist()
        mvx, mvy = s.m_vx[..., 0].tolist(), s.m_vy[..., 0].tolist()
        for side, name in enumerate(SIDES):
            for slot, on in enumerate(active[side]):
                if on:
                    missiles.append({
                        "id": f"{name}-{slot}", "side": name, "x": round(mx[side][slot], 2), "y": round(my[side][slot], 2),
                        "heading": round(math.atan2(mvy[side][slot], mvx[side][slot]), 5),
                        "speed": round(math.hypot(mvx[side][slot], mvy[side][slot]), 2), "alive": True,
                    })
        seats = {}
        for name, spec, seat in zip(SIDES, self.lineup.specs, self.lineup.seats, strict=True):
            entry: dict[str, Any] = {"spec": spec, "human": isinstance(seat, HumanSeat)}
            if isinstance(seat, HumanSeat):
                c = seat.controls
                entry.update(input_seq=c.seq, rudder=c.rudder, throttle=c.throttle, fire=c.fire)
            elif isinstance(seat, AgentSeat) and seat.source:
                entry["source"] = seat.source
            seats[name] = entry
        return {
            "type": "state", "t": round(self._t, 3), "dt": cfg.decision_dt_s, "round": self.round_index,
            "paused": self.paused, "time_scale": self.time_scale, "scenario": self.lineup.scenario,
            "fighters": fighters, "missiles": missiles, "score": self.score.as_dict(), "seats": seats,
        }
