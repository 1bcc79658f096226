"""Scripted opponents: fixed behaviours flying from the egocentric observation alone.

Every rule is a handful of tensor operations over the whole batch (no Python loop over
environments, no host sync), so a scripted side costs almost nothing next to the simulator.
They form a ladder for evaluation: ``straight`` < ``pursuit`` < ``shooter`` < ``crank``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch

from agents.base import BaseAgent
from sim.autopilot import pursuit_actions
from sim.config import SimConfig
from sim.layout import CLOSING_SCALE_MPS, MISSILE_SPEED_SCALE_MPS, RANGE_SCALE_M, ObsLayout
from sim.reach.missile import SPENT_SPEED_MPS, MissileTables, missile_tables
from sim.reach.spacetime import own_reach_straight


@lru_cache(maxsize=8)
def _cached_tables(config: SimConfig) -> MissileTables:
    return missile_tables(config)


def pursuit_rudder(obs: torch.Tensor, layout: ObsLayout) -> torch.Tensor:
    """Pure-pursuit rudder in {−1, 0, +1} (float ``[N]``): the built-in pursuit rule of
    :func:`sim.autopilot.pursuit_actions` (turn towards the enemy once its bearing sine leaves
    ±0.02; straight ahead fly on, straight behind turn left)."""
    return (pursuit_actions(obs, layout)[:, 0] - 1).to(obs.dtype)


def columns(obs: torch.Tensor, indices: list[int]) -> torch.Tensor:
    """``obs[:, indices]`` as a view when the indices are evenly spaced (the observation's
    per-missile blocks are), so no index list is copied from the host to the device on every
    call (a host sync per step on a GPU, and refused inside CUDA graph capture); otherwise
    gathered with an index tensor built once per device."""
    if not indices:
        raise ValueError("columns needs at least one index")
    steps = {b - a for a, b in itertools.pairwise(indices)}
    if len(indices) == 1 or (len(steps) == 1 and min(steps) > 0):
        step = steps.pop() if steps else 1
        return obs[:, indices[0]:indices[-1] + 1:step]
    return obs.index_select(1, _index_tensor(tuple(indices), obs.device))


@lru_cache(maxsize=256)
def _index_tensor(indices: tuple[int, ...], device: torch.device) -> torch.Tensor:
    return torch.tensor(indices, dtype=torch.int64, device=device)


def most_urgent_missile(obs: torch.Tensor, layout: ObsLayout, spent_speed_mps: torch.Tensor | float
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inbound missile with the shortest time to impact (range / closing speed) among the
    live ones (present, closing, at least ``spent_speed_mps``): its time to impact ``[N]`` (s;
    infinite when none is live), its observed (scaled) speed and its bearing sine (> 0: on the
    left) and cosine."""
    k = layout.incoming
    idx = [[layout.index(f"incoming[{i}].{f}") for i in range(k)]
           for f in ("present", "range", "speed", "closing_speed", "bearing_sin", "bearing_cos")]
    present, rng, speed, closing, bsin, bcos = (columns(obs, i) for i in idx)
    closing_mps = closing * CLOSING_SCALE_MPS
    tti = rng * RANGE_SCALE_M / closing_mps.clamp_min(1e-3)
    live = (present > 0.5) & (speed * MISSILE_SPEED_SCALE_MPS >= spent_speed_mps) & (closing_mps > 0)
    tti = torch.where(live, tti, torch.full_like(tti, math.inf))
    best = tti.argmin(dim=-1, keepdim=True)

    def pick(t: torch.Tensor) -> torch.Tensor:
        return t.gather(-1, best).squeeze(-1)

    return pick(tti), pick(speed), pick(bsin), pick(bcos)


COMPILED_KINDS = 64
"""Compiled versions of ``ScriptedAgent._decide`` one process keeps (one per agent kind and
parameter shape): Dynamo's ``recompile_limit`` is raised to this when an agent compiles."""


class ScriptedAgent(BaseAgent):
    """Base of the scripted opponents: knows the observation layout and the missile tables."""

    def __init__(
        self,
        num_envs: int,
        layout: ObsLayout,
        device: torch.device | str = "cpu",
        action_mode: str = "discrete",
        sim_config: SimConfig | None = None,
        seed: int = 0,
    ):
        # ``seed`` is accepted for a uniform constructor and unused: scripted agents are
        # deterministic.
        super().__init__(num_envs, device, action_mode)
        if not isinstance(layout, ObsLayout):
            raise ValueError(f"layout must be an ObsLayout, got {type(layout).__name__}")
        self.layout = layout
        self.sim_config = sim_config if sim_config is not None else SimConfig()
        self._tables: MissileTables | None = None
        self._compiled: Callable[[torch.Tensor], torch.Tensor] | None = None

    def compile(self) -> ScriptedAgent:
        """Fuse the decision (:meth:`commands` and the encoding) with ``torch.compile``: the
        same actions (tests/test_agents.py), in one kernel instead of a chain of small ops
        (crank at 64 environments on one CPU core: 1.05 ms → 0.04 ms a call, after about 8 s
        of compiling, cached on disk by PyTorch for later runs). Returns self."""
        self.prepare()
        # Every scripted agent compiles the one method ``_decide``, and Dynamo keeps the compiled
        # versions of one function under one limit (8 by default): a league with more anchor
        # kinds than that (the tactic library's six beside crank, shooter, random, ...) would
        # run the rest eagerly. Each kind takes one entry, so the limit is raised to cover them.
        dynamo_config = torch._dynamo.config
        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, COMPILED_KINDS)
        self._compiled = torch.compile(self._decide, dynamic=False)
        return self

    def prepare(self) -> None:
        """Build the missile tables (checked on the host, so never inside a trace)."""
        self.tables()

    def tables(self) -> MissileTables:
        """The missile tables for this agent's sim config, float32 on its device (built lazily)."""
        if self._tables is None or self._tables.times_s.device != self.device:
            self._tables = _cached_tables(self.sim_config).to(self.device, torch.float32)
        return self._tables

    def col(self, obs: torch.Tensor, name: str) -> torch.Tensor:
        """One named observation component ``[N]``."""
        return obs[:, self.layout.index(name)]

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions ``[N, 3]`` for observations ``[N, D]``."""
        self._check_obs(obs, self.layout.size)
        if self._compiled is None:
            return self._decide(obs)
        self.tables()  # built outside the compiled code (they are checked on the host)
        return self._compiled(obs)

    def _decide(self, obs: torch.Tensor) -> torch.Tensor:
        rudder, throttle, fire = self.commands(obs)
        return self.encode(rudder, throttle, fire)

    def commands(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rudder {−1, 0, 1}, throttle {0, 0.5, 1} (float ``[N]``) and fire (bool ``[N]``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement commands()")

    def in_reach(self, obs: torch.Tensor, reach_fraction: float, cone_deg: float) -> torch.Tensor:
        """Bool ``[N]``: a launch now is worth it — enemy alive, within ``cone_deg`` off the
        nose and within ``reach_fraction`` of the missile's reach against it flying straight,
        own fire ready, missiles left, and no own missile in flight."""
        reach = own_reach_straight(obs, self.layout, self.tables())
        rng = self.col(obs, "enemy.range").to(reach.dtype) * RANGE_SCALE_M
        return (
            (rng <= reach_fraction * reach)
            & (self.col(obs, "enemy.bearing_cos") >= math.cos(math.radians(cone_deg)))
            & (self.col(obs, "enemy.alive") > 0.5)
            & (self.col(obs, "own.fire_ready") >= 1.0)
            & (self.col(obs, "own.missiles_left") > 0)
            & (self.col(obs, "own_missile[0].present") < 0.5)
        )


class StraightAgent(ScriptedAgent):
    """Flies straight ahead at full throttle and never fires."""

    def commands(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rudder 0, throttle 1, no fire."""
        n = obs.shape[0]
        zero = torch.zeros(n, device=obs.device)
        return zero, zero + 1.0, torch.zeros(n, dtype=torch.bool, device=obs.device)


class PursuitAgent(ScriptedAgent):
    """Pure pursuit at full throttle, never fires: exactly the built-in pursuit opponent of
    ``sim/RULES.md`` (rudder towards the enemy's bearing with a ±0.02 sine dead band)."""

    def commands(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pursuit rudder, throttle 1, no fire."""
        rudder = pursuit_rudder(obs, self.layout)
        return rudder, torch.ones_like(rudder), torch.zeros_like(rudder, dtype=torch.bool)


@dataclass(frozen=True)
class ShooterConfig:
    """Settings of the ``shooter`` opponent."""

    reach_fraction: float = 0.85
    """Fire when the range is under this fraction of the reach against a straight-flying
    target (a margin for the target's manoeuvres and guidance losses)."""
    fire_cone_deg: float = 30.0
    """Fire only with the enemy within this angle off the nose."""


class ShooterAgent(ScriptedAgent):
    """Pure pursuit at full throttle; fires when the enemy is inside the missile's reach for the
    current geometry (:func:`sim.reach.spacetime.reach_straight`, times ``reach_fraction``) and within
    30° off the nose, with one own missile in flight at a time. Never evades."""

    def __init__(self, *args, config: ShooterConfig | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = config if config is not None else ShooterConfig()

    def commands(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pursuit rudder, throttle 1, fire when in reach."""
        rudder = pursuit_rudder(obs, self.layout)
        fire = self.in_reach(obs, self.config.reach_fraction, self.config.fire_cone_deg)
        return rudder, torch.ones_like(rudder), fire


@dataclass(frozen=True)
class CrankConfig:
    """Settings of the ``crank`` opponent."""

    reach_fraction: float = 1.0
    """Fire at this fraction of the reach against a straight-flying target (long range)."""
    fire_cone_deg: float = 30.0
    """Fire only with the enemy within this angle off the nose."""
    crank_angle_deg: float = 50.0
    """While the own missile flies, hold the enemy this far off the nose."""
    crank_deadband_deg: float = 3.0
    """No rudder while the enemy is within this of the crank angle."""
    defend_tti_s: float = 20.0
    """Turn away from an inbound missile whose time to impact (range / closing speed) is under
    this."""
    spent_speed_mps: float = SPENT_SPEED_MPS
    """An inbound missile slower than this is spent and ignored (re-engage)."""
    tail_cos: float = 0.985
    """Defending, stop turning once the missile's bearing cosine is below −tail_cos (behind)."""


class CrankAgent(ScriptedAgent):
    """Long-range shot, crank, defend, re-engage; in priority order:

    1. **Defend**: an inbound enemy missile, not spent (at least Mach 1), closing, with time to
       impact under ``defend_tti_s``: turn away from it at full rudder and throttle until it is
       behind, then fly straight away; it bleeds energy chasing and is lost.
    2. **Crank**: while an own missile flies, hold the enemy about ``crank_angle_deg`` off the
       nose on whichever side it already is, which slows the closure (and the enemy's shots)
       while keeping the guidance geometry.
    3. **Engage**: otherwise pure pursuit, firing at long range (the full reach against a
       straight-flying target) within 30° off the nose, one missile at a time.
    """

    def __init__(self, *args, config: CrankConfig | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.config = config if config is not None else CrankConfig()

    def threat(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Bool ``[N]``: some inbound missile is a threat now; and the bearing sine (> 0: on
        the left) and cosine of the most urgent one."""
        tti, _, bsin, bcos = most_urgent_missile(obs, self.layout, self.config.spent_speed_mps)
        return tti < self.config.defend_tti_s, bsin, bcos

    def commands(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Defend, crank or engage (see the class docstring)."""
        cfg = self.config
        threatened, missile_bs, missile_bc = self.threat(obs)
        # Defend: put the missile behind. Turning right (−1) moves a left-side object aft.
        away = torch.where(missile_bs >= 0, -1.0, 1.0)
        behind = missile_bc < -cfg.tail_cos
        defend_rudder = torch.where(behind, torch.zeros_like(away), away)

        # Crank: steer so |bearing| approaches the crank angle on the enemy's current side.
        bs = self.col(obs, "enemy.bearing_sin")
        bc = self.col(obs, "enemy.bearing_cos")
        off_nose = torch.atan2(bs.abs(), bc)
        side = torch.where(bs >= 0, 1.0, -1.0)
        target = math.radians(cfg.crank_angle_deg)
        band = math.radians(cfg.crank_deadband_deg)
        crank_rudder = torch.where(
            off_nose > target + band, side, torch.where(off_nose < target - band, -side, 0.0 * side)
        )
        cranking = self.col(obs, "own_missile[0].present") > 0.5

        rudder = pursuit_rudder(obs, self.layout)
        rudder = torch.where(cranking, crank_rudder, rudder)
        rudder = torch.where(threatened, defend_rudder, rudder)
        fire = self.in_reach(obs, cfg.reach_fraction, cfg.fire_cone_deg) & ~threatened
        return rudder, torch.ones_like(rudder), fire
