"""The base of the tactic library: per-environment parameters drawn at random, and the moves
every tactic is built from.

A tactic is a :class:`~agents.scripted.ScriptedAgent` whose rule reads its parameters from a
tensor ``[N, P]``, one row per environment. Fixed, every row holds the parameters it was built
with; randomised, each environment's row is drawn uniformly from a box of ranges (one range per
parameter) when the agent is built and again in :meth:`TacticAgent.reset` for the environments
whose episode ended, from the agent's own seeded generator: the same seed gives the same draws,
and an environment keeps its parameters for a whole episode.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from agents.base import seeded_generator
from agents.scripted import ScriptedAgent, most_urgent_missile
from sim.config import SimConfig
from sim.layout import MISSILE_SPEED_SCALE_MPS, RANGE_SCALE_M, SPEED_SCALE_MPS, ObsLayout
from sim.reach.missile import SPENT_SPEED_MPS
from sim.reach.spacetime import (
    own_reach_straight,
    own_reach_turning_away,
    reach_straight,
    reach_turning_away,
)

Ranges = Mapping[str, tuple[float, float]]
"""A range ``(low, high)`` per parameter name."""


def on_device(value: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor:
    """``value`` as a tensor of ``like``'s dtype on its device. A number is written there by a
    fill kernel (``torch.as_tensor(number, device=...)`` would copy it from the host: a host
    sync per call on a GPU, and refused inside CUDA graph capture)."""
    if isinstance(value, torch.Tensor):
        return value.to(device=like.device, dtype=like.dtype)
    return like.new_full((), value)


def hold_at_angle(bearing_sin: torch.Tensor, bearing_cos: torch.Tensor, angle_deg: torch.Tensor | float,
                  deadband_deg: torch.Tensor | float) -> torch.Tensor:
    """Rudder in {−1, 0, +1} (float ``[N]``) that brings an object seen at this bearing to
    ``angle_deg`` off the nose on whichever side it already is, with no rudder within
    ``deadband_deg`` of it: 0° is pursuit, 50° a crank, 90° the beam, 180° puts it behind."""
    off_nose = torch.atan2(bearing_sin.abs(), bearing_cos)
    side = torch.where(bearing_sin >= 0, 1.0, -1.0)
    target = on_device(angle_deg, off_nose) * (math.pi / 180)
    band = on_device(deadband_deg, off_nose) * (math.pi / 180)
    return torch.where(off_nose > target + band, side, torch.where(off_nose < target - band, -side, 0.0 * side))


def check_ranges(params_type: type, full: Ranges, ranges: Ranges, who: str) -> None:
    """Raise ``ValueError`` unless every range names a parameter of ``params_type``, is ordered
    and lies inside that parameter's documented range in ``full``."""
    names = {f.name for f in dataclasses.fields(params_type)}
    for name, (low, high) in ranges.items():
        if name not in names:
            raise ValueError(f"{who}: no parameter {name!r} (parameters: {', '.join(sorted(names))})")
        lo, hi = full[name]
        if not lo <= low <= high <= hi:
            raise ValueError(f"{who}: range {name}=({low}, {high}) must be ordered and inside its "
                             f"documented range ({lo}, {hi})")


class TacticAgent(ScriptedAgent):
    """A scripted tactic with parameters per environment.

    Subclasses set :attr:`name`, :attr:`params_type` (a frozen dataclass of floats, its defaults
    the tactic's defaults) and :attr:`ranges` (the documented range of every parameter), and
    implement :meth:`commands` reading parameters with :meth:`param`. ``params`` replaces the
    defaults; ``draw`` (ranges for some or all parameters) makes those parameters random per
    episode, drawn with ``seed``.
    """

    name: ClassVar[str]
    params_type: ClassVar[type[Any]]
    ranges: ClassVar[Ranges]

    def __init__(
        self,
        num_envs: int,
        layout: ObsLayout,
        device: torch.device | str = "cpu",
        action_mode: str = "discrete",
        sim_config: SimConfig | None = None,
        seed: int = 0,
        params: Any = None,
        draw: Ranges | None = None,
    ):
        super().__init__(num_envs, layout, device, action_mode, sim_config, seed)
        self.params = params if params is not None else self.params_type()
        if not isinstance(self.params, self.params_type):
            raise ValueError(f"tactic {self.name}: params must be a {self.params_type.__name__}, "
                             f"got {type(self.params).__name__}")
        fixed = {f.name: (float(getattr(self.params, f.name)),) * 2 for f in dataclasses.fields(self.params_type)}
        check_ranges(self.params_type, self.ranges, fixed, f"tactic {self.name}")
        self.draw = dict(draw or {})
        check_ranges(self.params_type, self.ranges, self.draw, f"tactic {self.name}")
        self._names = list(fixed)
        self._index = {n: i for i, n in enumerate(self._names)}
        box = [self.draw.get(n, fixed[n]) for n in self._names]
        self._low_values = [float(lo) for lo, _ in box]
        self._high_values = [float(hi) for _, hi in box]
        self.seed = seed
        self._place()
        self.values = torch.empty(num_envs, len(self._names), device=self.device)
        self._redraw(torch.ones(num_envs, dtype=torch.bool, device=self.device))

    def _place(self) -> None:
        self._low = torch.tensor(self._low_values, device=self.device)
        self._high = torch.tensor(self._high_values, device=self.device)
        self._generator = seeded_generator(self.device, self.seed) if self.draw else None

    def param(self, name: str) -> torch.Tensor:
        """One parameter per environment ``[N]``."""
        return self.values[:, self._index[name]]

    def reset(self, env_mask: torch.Tensor) -> None:
        """Draw new parameters for the environments where ``env_mask`` is true (randomised
        tactics; fixed ones keep theirs). In place, with no host read."""
        self._check_mask(env_mask)
        if self.draw:
            self._redraw(env_mask)

    def _redraw(self, env_mask: torch.Tensor) -> None:
        u = torch.rand(self.values.shape, generator=self._generator, device=self.device)
        drawn = self._low + (self._high - self._low) * u
        self.values.copy_(torch.where(env_mask.unsqueeze(-1), drawn, self.values))

    def to(self, device: torch.device | str) -> TacticAgent:
        """Move to ``device`` keeping each environment's parameters; the generator restarts
        from the seed."""
        super().to(device)
        self.values = self.values.to(self.device)
        self._place()
        return self

    # ------------------------------------------------------------------ moves
    def range_m(self, obs: torch.Tensor) -> torch.Tensor:
        """Range to the enemy ``[N]`` (m)."""
        return self.col(obs, "enemy.range") * RANGE_SCALE_M

    def reach_m(self, obs: torch.Tensor) -> torch.Tensor:
        """Reach of an own missile launched now against the enemy flying straight ``[N]`` (m)."""
        return own_reach_straight(obs, self.layout, self.tables()).to(obs.dtype)

    def no_escape_reach_m(self, obs: torch.Tensor) -> torch.Tensor:
        """Reach of an own missile launched now against the enemy turning away at once ``[N]``
        (m): inside it the enemy cannot outrun the shot."""
        return own_reach_turning_away(obs, self.layout, self.tables()).to(obs.dtype)

    def enemy_reach_m(self, obs: torch.Tensor, hot: bool = False, escape: bool = False) -> torch.Tensor:
        """Reach of an enemy missile launched now against me ``[N]`` (m): flying straight on,
        or (``escape``) turning away at once; ``hot``: from a heading straight at the enemy
        (what it will be once I turn in) instead of my own."""
        f = obs.to(self.tables().distance_m.dtype)
        bc, bs = self.col(f, "enemy.bearing_cos"), self.col(f, "enemy.bearing_sin")
        if hot:
            bc, bs = torch.ones_like(bc), torch.zeros_like(bs)
        reach = reach_turning_away if escape else reach_straight
        return reach(self.tables(), self.col(f, "enemy.speed") * SPEED_SCALE_MPS,
                     self.col(f, "own.speed") * SPEED_SCALE_MPS, -bc, bs).to(obs.dtype)

    def pursuit(self, obs: torch.Tensor, deadband_deg: torch.Tensor | float = 1.0) -> torch.Tensor:
        """Rudder towards the enemy (no rudder within ``deadband_deg`` of the nose)."""
        return hold_at_angle(self.col(obs, "enemy.bearing_sin"), self.col(obs, "enemy.bearing_cos"),
                             0.0, deadband_deg)

    def hold_enemy(self, obs: torch.Tensor, angle_deg: torch.Tensor | float,
                   deadband_deg: torch.Tensor | float = 3.0) -> torch.Tensor:
        """Rudder holding the enemy ``angle_deg`` off the nose (a crank; 180: turn cold)."""
        return hold_at_angle(self.col(obs, "enemy.bearing_sin"), self.col(obs, "enemy.bearing_cos"),
                             angle_deg, deadband_deg)

    def threat(self, obs: torch.Tensor, spent_speed_mps: torch.Tensor | float
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The most urgent inbound missile: time to impact ``[N]`` (s; infinite when none is
        live: present, closing and at least ``spent_speed_mps``), its speed (m/s) and bearing
        sine and cosine."""
        if isinstance(spent_speed_mps, torch.Tensor):
            spent_speed_mps = spent_speed_mps.unsqueeze(-1)  # one per environment, against [N, K]
        tti, speed, bs, bc = most_urgent_missile(obs, self.layout, spent_speed_mps)
        return tti, speed * MISSILE_SPEED_SCALE_MPS, bs, bc

    def drag(self, obs: torch.Tensor, rudder: torch.Tensor, defend_tti_s: torch.Tensor | float,
             spent_speed_mps: torch.Tensor | float = SPENT_SPEED_MPS) -> tuple[torch.Tensor, torch.Tensor]:
        """``rudder`` overridden, where a live inbound missile's time to impact is under
        ``defend_tti_s``, by the drag: put it dead behind (within 5°) at full throttle, so that it
        must chase from behind and bleeds its speed. Returns the rudder and those flags."""
        tti, _, mbs, mbc = self.threat(obs, spent_speed_mps)
        threatened = tti < defend_tti_s
        return torch.where(threatened, hold_at_angle(mbs, mbc, 180.0, 5.0), rudder), threatened

    def own_in_flight(self, obs: torch.Tensor) -> torch.Tensor:
        """How many own missiles are in flight ``[N]`` (float; the observation lists at most
        ``obs_own_missiles``)."""
        count = torch.zeros_like(obs[:, 0])
        for i in range(self.layout.own_missiles):
            count = count + (self.col(obs, f"own_missile[{i}].present") > 0.5).to(obs.dtype)
        return count

    def can_fire(self, obs: torch.Tensor, cone_deg: torch.Tensor | float) -> torch.Tensor:
        """Bool ``[N]``: enemy alive and within ``cone_deg`` off the nose, own fire ready and
        missiles left (the range and the missiles in flight are each tactic's own rule)."""
        cone = on_device(cone_deg, obs) * (math.pi / 180)
        return (
            (self.col(obs, "enemy.bearing_cos") >= torch.cos(cone))
            & (self.col(obs, "enemy.alive") > 0.5)
            & (self.col(obs, "own.fire_ready") >= 1.0)
            & (self.col(obs, "own.missiles_left") > 0)
        )

    def shot(self, obs: torch.Tensor, launch_fraction: torch.Tensor | float, cone_deg: torch.Tensor | float = 30.0,
             max_in_flight: torch.Tensor | float = 1.0) -> torch.Tensor:
        """Bool ``[N]``: :meth:`can_fire`, fewer than ``max_in_flight`` own missiles in flight
        (by default none) and the range within ``launch_fraction`` of the reach against the enemy
        flying straight."""
        return (self.can_fire(obs, cone_deg) & (self.own_in_flight(obs) < max_in_flight)
                & (self.range_m(obs) <= launch_fraction * self.reach_m(obs)))

    def engage(self, obs: torch.Tensor, launch_fraction: torch.Tensor | float, crank_angle_deg: torch.Tensor | float
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rudder and fire of the common offence: pursuit, a shot at ``launch_fraction`` of the
        reach, and a crank at ``crank_angle_deg`` while it flies."""
        flying = self.own_in_flight(obs) > 0
        rudder = torch.where(flying, self.hold_enemy(obs, crank_angle_deg), self.pursuit(obs))
        return rudder, self.shot(obs, launch_fraction)


class ScheduledTactic(TacticAgent):
    """A tactic whose flying changes on a schedule drawn per episode: :attr:`segments` segments,
    each lasting a time drawn from an exponential distribution with mean ``mean_hold_s`` (a
    parameter every subclass has), the last flying to the end, and one value per segment
    (:attr:`plan`, ``[N, S]`` of :attr:`plan_dtype`) that :meth:`draw_plan` draws and
    :meth:`segment_plan` reads. The schedule is drawn even with fixed parameters, from the agent's
    seeded generator: the segment ends first, then the plan. The elapsed time is read from the
    observation's ``time.time_left``, so it stays a rule of the observation, batched with no host
    sync and compilable."""

    segments: ClassVar[int]
    plan_dtype: ClassVar[torch.dtype] = torch.float32
    ends_s: torch.Tensor
    """When each segment ends, per environment (s since the episode's start, ``[N, S]``)."""
    plan: torch.Tensor
    """One value per segment, per environment (``[N, S]``): what the segment flies, as each
    subclass reads it."""

    def _place(self) -> None:
        super()._place()
        self._generator = seeded_generator(self.device, self.seed)  # the schedule is always drawn
        if hasattr(self, "plan"):  # moved by to(), keeping each environment's schedule
            self.ends_s, self.plan = self.ends_s.to(self.device), self.plan.to(self.device)
        else:
            self.ends_s = torch.empty(self.num_envs, self.segments, device=self.device)
            self.plan = torch.empty(self.num_envs, self.segments, dtype=self.plan_dtype, device=self.device)

    def draw_plan(self, generator: torch.Generator | None) -> torch.Tensor:
        """A fresh plan for every environment, ``[N, S]`` of :attr:`plan_dtype`, drawn from
        ``generator`` (only the reset environments' rows are kept; None, on a device with no
        generator such as ``meta``: the default one)."""
        raise NotImplementedError(f"{type(self).__name__} must implement draw_plan()")

    def _redraw(self, env_mask: torch.Tensor) -> None:
        super()._redraw(env_mask)
        hold = torch.rand(self.ends_s.shape, generator=self._generator, device=self.device)
        ends = (-torch.log1p(-hold) * self.param("mean_hold_s")[:, None]).cumsum(1)  # exponential holds
        plan = self.draw_plan(self._generator)
        mask = env_mask.unsqueeze(-1)
        self.ends_s.copy_(torch.where(mask, ends, self.ends_s))
        self.plan.copy_(torch.where(mask, plan, self.plan))

    def reset(self, env_mask: torch.Tensor) -> None:
        """Draw a new schedule (and the parameters where they are random) for the environments
        where ``env_mask`` is true. In place, with no host read."""
        self._check_mask(env_mask)
        self._redraw(env_mask)

    def segment_plan(self, obs: torch.Tensor) -> torch.Tensor:
        """The plan's value for the segment flying now, per environment (``[N]``)."""
        elapsed = (1.0 - self.col(obs, "time.time_left")) * self.sim_config.max_time_s
        segment = (self.ends_s <= elapsed.unsqueeze(-1)).sum(-1).clamp(max=self.segments - 1)
        return self.plan.gather(1, segment.unsqueeze(-1)).squeeze(-1)
