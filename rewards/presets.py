"""Reward presets: ``zero``, ``outcome``, ``draw``, ``launch``, ``wasted``, ``closing``, ``hunt``,
``disarmed``, ``edge``, ``press``, ``ammo`` and ``shaped``."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rewards.base import BaseReward, StepInfo, check_inputs
from sim.config import SimConfig
from sim.layout import RANGE_SCALE_M, ObsLayout
from sim.reach.missile import cached_tables
from sim.reach.spacetime import own_reach_turning_away

EDGE_BAND_START = 0.8
"""Where :class:`EdgeReward`'s band begins, as a fraction of the arena's half width."""

class ZeroReward(BaseReward):
    """Always 0 (for exploration experiments, or as a neutral term in a sum)."""

    def compute(self, obs_before, obs_after, action, done, info: StepInfo) -> torch.Tensor:
        """Zeros ``[N]``."""
        n = check_inputs(obs_before, obs_after, action, done, info)
        return torch.zeros(n, dtype=torch.float32, device=obs_before.device)


class OutcomeReward(BaseReward):
    """The environment's own reward: +1 win, −1 loss, 0 draw, on the terminating step only."""

    def compute(self, obs_before, obs_after, action, done, info: StepInfo) -> torch.Tensor:
        """``info["reward"]`` as float32."""
        check_inputs(obs_before, obs_after, action, done, info)
        return info["reward"].to(torch.float32)


class DrawReward(BaseReward):
    """1 on the step an episode ends in a draw (time limit, ammunition out, mutual kill), else 0.

    A term to price draws in a sum: ``--reward shaped+-0.5*draw`` makes a draw cost half a
    loss, so a fighter that wastes its missiles and is left unable to win learns that it has
    lost something.
    """

    def compute(self, obs_before, obs_after, action, done, info: StepInfo) -> torch.Tensor:
        """``[N]`` float32: ``done & (winner == draw)``."""
        check_inputs(obs_before, obs_after, action, done, info)
        return (done & (info["winner"] == 2)).to(torch.float32)


class LaunchReward(BaseReward):
    """1 per own launch in this step, else 0.

    A price on every missile in a sum: ``--reward shaped+-0.03*launch`` makes each shot cost
    0.04 with ``shaped``'s own 0.01, six of them a quarter of a win, for a fighter that empties
    its rack early and is left to draw. Measured on the default recipe it helped one seed
    (94.5 % against ``crank`` where the default won 83.5 %) and broke another (71.2 %), so it
    is not in the default (bench/RESULTS.md, "A longer look ahead and a stronger hunt").
    """

    def compute(self, obs_before, obs_after, action, done, info: StepInfo) -> torch.Tensor:
        """``[N]`` float32: ``info["launches"]``."""
        check_inputs(obs_before, obs_after, action, done, info)
        return info["launches"].to(torch.float32)


class WastedLaunchReward(BaseReward):
    """1 per own launch made while the enemy was beyond the missile's no-escape reach (the
    reach against the enemy turning away at once, :func:`sim.reach.spacetime.own_reach_turning_away`,
    from the observation the launch was decided on), else 0.

    A launch outside that reach can be outrun; ``--reward shaped+-0.1*wasted`` teaches a
    fighter to hold its fire until the shot cannot be escaped, instead of ripple-firing its
    missiles at the first sight of the enemy.
    """

    def __init__(self, device: torch.device | str = "cpu", layout: ObsLayout | None = None,
                 sim_config: SimConfig | None = None):
        super().__init__(device)
        self.layout = layout if layout is not None else ObsLayout(1, 1)
        self.i_range = self.layout.index("enemy.range")
        self._tables = cached_tables(sim_config if sim_config is not None else SimConfig(), "cpu", "float32")

    def to(self, device: torch.device | str) -> WastedLaunchReward:
        super().to(device)
        self._tables = self._tables.to(self.device, torch.float32)
        return self

    def compute(self, obs_before, obs_after, action, done, info: StepInfo) -> torch.Tensor:
        """``[N]`` float32: own launches in this step where the range exceeded the no-escape reach."""
        check_inputs(obs_before, obs_after, action, done, info)
        nez = own_reach_turning_away(obs_before, self.layout, self._tables)
        outside = obs_before[:, self.i_range].to(nez.dtype) * RANGE_SCALE_M > nez
        return info["launches"].to(torch.float32) * outside.to(torch.float32)


class ClosingReward(BaseReward):
    """The decrease of the range to the enemy in this step, in units of 50 km (the observation's
    range scale), while the own fighter is alive; else 0.

    A potential-based term (its episode total telescopes to first range − last range), so it
    changes how soon a fighter learns to go after its enemy, not which policy is best:
    ``--reward shaped+0.1*closing`` pulls a fighter back towards an enemy it has outrun.
    """

    def __init__(self, device: torch.device | str = "cpu", layout: ObsLayout | None = None):
        super().__init__(device)
        layout = layout if layout is not None else ObsLayout(1, 1)
        self.i_range = layout.index("enemy.range")
        self.i_own_alive = layout.index("own.alive")

    def compute(self, obs_before, obs_after, action, done, info: StepInfo) -> torch.Tensor:
        """``[N]`` float32: range before − range after, in 50-km units."""
        check_inputs(obs_before, obs_after, action, done, info)
        return self._closed(obs_before, obs_after)

    def _closed(self, obs_before: torch.Tensor, obs_after: torch.Tensor) -> torch.Tensor:
        alive = obs_after[:, self.i_own_alive].float()
        return (obs_before[:, self.i_range] - obs_after[:, self.i_range]).float() * alive


class PotentialReward(BaseReward):
    """A term that is the change of a potential ``Φ`` of the observation:
    ``Φ(obs_after) − Φ(obs_before)``, so its episode total is ``Φ`` at the end less ``Φ`` at
    the start. Subclasses implement :meth:`potential`."""

    def potential(self, obs: torch.Tensor) -> torch.Tensor:
        """``Φ`` of each observation ``[N]``."""
        raise NotImplementedError(f"{type(self).__name__} must implement potential()")

    def compute(self, obs_before, obs_after, action, done, info: StepInfo) -> torch.Tensor:
        """``[N]`` float32: ``Φ(obs_after) − Φ(obs_before)``."""
        check_inputs(obs_before, obs_after, action, done, info)
        return self.potential(obs_after) - self.potential(obs_before)


def edge_band(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """How deep a position (over the arena's half width) lies in the arena's outer band: 0
    inside ``EDGE_BAND_START``, 1 at and past the edge."""
    d = torch.maximum(x.abs(), y.abs())
    return ((d - EDGE_BAND_START) / (1.0 - EDGE_BAND_START)).clamp(0.0, 1.0)


class HuntReward(PotentialReward):
    """The change of a potential ``Φ = −range`` (in units of 50 km) that holds while the enemy
    is disarmed (no missiles left, none of its missiles in flight) and alive, and is 0
    otherwise: ``Φ(after) − Φ(before)``.

    A disarmed enemy can no longer hurt the fighter, and a fight against it that runs to the
    time limit is a draw thrown away: the sim's default reward, ``shaped+0.75*hunt``, pays the
    fighter for every metre it closes on such an enemy. Being a potential's difference, its
    episode total is ``Φ`` at the end: 0 when the enemy was shot down (or was never
    disarmed), minus the final range when the fight ended with a disarmed enemy still flying,
    a draw priced by how far off the fighter stayed. The moment the enemy fires its last
    missile costs the range at that moment, which the hunt earns back: so nothing is gained
    by letting an armed enemy empty its missiles from afar (the first form of this term, the
    range closed from that moment on, paid for that, and made a fighter draw out fights
    against ``crank``: bench/RESULTS.md, "A curriculum of endgames").
    """

    def __init__(self, device: torch.device | str = "cpu", layout: ObsLayout | None = None):
        super().__init__(device)
        layout = layout if layout is not None else ObsLayout(1, 1)
        self.i_range = layout.index("enemy.range")
        self.i_enemy_alive = layout.index("enemy.alive")
        self.i_enemy_left = layout.index("enemy.missiles_left")
        self.i_incoming = layout.index("incoming[0].present")

    def potential(self, obs: torch.Tensor) -> torch.Tensor:
        """``Φ`` of each observation ``[N]``: −range against a disarmed, living enemy, else 0."""
        # Incoming missiles are listed nearest first, absent entries all zero: slot 0 is
        # present whenever any of the enemy's missiles is in flight.
        hunted = ((obs[:, self.i_enemy_left] <= 0) & (obs[:, self.i_incoming] < 0.5)
                  & (obs[:, self.i_enemy_alive] > 0.5))
        return torch.where(hunted, -obs[:, self.i_range].float(), 0.0)


class EdgeReward(PotentialReward):
    """The change of a potential that falls from 0 to −1 across the arena's outer band:
    ``Φ = −clamp((d − EDGE_BAND_START) / (1 − EDGE_BAND_START), 0, 1)``, with ``d`` the own
    fighter's larger coordinate over the arena's half width (1 at the edge, where it is out):
    ``Φ(after) − Φ(before)``.

    Leaving the arena loses the fight, but the loss is priced only when it happens, after a drag
    away from a missile that ran out of room; the band prices each kilometre towards the edge
    from 60 km of the centre (of 75 km) on, so a fighter learns to defend along or away from the
    edge while it still can. Being a potential's difference, its episode total is ``Φ`` at the
    end less ``Φ`` at the start (0 for the rules' start, within ±20 km of the centre): −1 for a
    fight lost out of the arena, 0 for one that ends inside the inner 80 %.
    """

    def __init__(self, device: torch.device | str = "cpu", layout: ObsLayout | None = None):
        super().__init__(device)
        layout = layout if layout is not None else ObsLayout(1, 1)
        self.i_x, self.i_y = layout.index("own.x"), layout.index("own.y")

    def potential(self, obs: torch.Tensor) -> torch.Tensor:
        """``Φ`` of each observation ``[N]``: 0 inside the inner 80 %, −1 at and past the edge."""
        return -edge_band(obs[:, self.i_x].float(), obs[:, self.i_y].float())


class PressReward(PotentialReward):
    """The change of a potential that rises from 0 to 1 as the *enemy* crosses the arena's outer
    band, while it is alive: ``Φ = clamp((d_e − EDGE_BAND_START) / (1 − EDGE_BAND_START), 0, 1)``,
    with ``d_e`` the enemy's larger coordinate over the arena's half width, found from the own
    position and heading and the enemy's range and bearing; ``Φ = 0`` once it is dead.
    ``Φ(after) − Φ(before)``.

    :class:`EdgeReward`'s mirror: a tactic that turns away from each threat (``pump``) is
    beaten by pressing it until it runs out of room, a chase paid only at its end, if the time
    limit does not come first. This term pays each kilometre the enemy is pressed into the band
    and takes it back when the enemy dies (of a missile or out of the arena), so its episode
    total is ``Φ`` at the end: 0 for a fight won, the enemy's depth in the band for one drawn
    with the enemy pressed against the edge. It shapes the chase and leaves the outcome's price
    as it is.
    """

    def __init__(self, device: torch.device | str = "cpu", layout: ObsLayout | None = None,
                 sim_config: SimConfig | None = None):
        super().__init__(device)
        layout = layout if layout is not None else ObsLayout(1, 1)
        self.own = [layout.index(f"own.{f}") for f in ("x", "y", "heading_cos", "heading_sin")]
        self.enemy = [layout.index(f"enemy.{f}") for f in ("alive", "range", "bearing_cos", "bearing_sin")]
        config = sim_config if sim_config is not None else SimConfig()
        self.range_to_half = RANGE_SCALE_M / config.arena_half_width_m

    def enemy_position(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The enemy's world position over the arena's half width, ``[N]`` each."""
        x, y, nx, ny = (obs[:, i].float() for i in self.own)
        _, rng, bc, bs = (obs[:, i].float() for i in self.enemy)
        r = rng * self.range_to_half
        return x + r * (bc * nx - bs * ny), y + r * (bc * ny + bs * nx)

    def potential(self, obs: torch.Tensor) -> torch.Tensor:
        """``Φ`` of each observation ``[N]``: 0 with the enemy inside the inner 80 % or dead, 1
        with it at or past the edge and alive."""
        return torch.where(obs[:, self.enemy[0]] > 0.5, edge_band(*self.enemy_position(obs)), 0.0)


class DisarmedReward(PotentialReward):
    """The change of a potential ``Φ = −1`` that holds while the fighter is disarmed (no
    missiles left, none of its own in flight) and its enemy alive, and is 0 otherwise:
    ``Φ(after) − Φ(before)``.

    The mirror of :class:`HuntReward`: a fighter that has fired its last missile and missed can
    no longer win, but the draw that follows is priced only when the time limit ends the fight,
    hundreds of decisions later and discounted away. This term charges the fighter the moment
    its last missile is gone without a kill (``--reward shaped+0.75*hunt+0.5*disarmed`` makes
    it half a loss), and gives it back if the enemy is shot down after all. Being a potential's
    difference, its episode total is ``Φ`` at the end: −1 for a fight that ended with the
    fighter disarmed and its enemy alive, else 0.
    """

    def __init__(self, device: torch.device | str = "cpu", layout: ObsLayout | None = None):
        super().__init__(device)
        layout = layout if layout is not None else ObsLayout(1, 1)
        self.i_left = layout.index("own.missiles_left")
        self.i_enemy_alive = layout.index("enemy.alive")
        self.i_own_flying = [layout.index(f"own_missile[{i}].present") for i in range(layout.own_missiles)]

    def potential(self, obs: torch.Tensor) -> torch.Tensor:
        """``Φ`` of each observation ``[N]``: −1 while disarmed against a living enemy, else 0."""
        disarmed = (obs[:, self.i_left] <= 0) & (obs[:, self.i_enemy_alive] > 0.5)
        for i in self.i_own_flying:
            disarmed = disarmed & (obs[:, i] < 0.5)
        return -disarmed.float()


class AmmoReward(PotentialReward):
    """The change of a potential ``Φ`` that is the missile balance of a fight both fighters are
    still in: own missiles on board and in flight less the enemy's, over
    ``missiles_per_fighter``; ``Φ = 0`` once either is dead. ``Φ(after) − Φ(before)``.

    A missile counts as long as it is on board or flying, so a launch changes nothing; the term
    moves when a missile is gone without a kill: −1/M for one of the fighter's own, +1/M for
    one of the enemy's. It prices what a round of shots did, at the moment it is decided, where
    the outcome prices it only at the end of the fight: a shot the enemy outruns costs the
    fighter, an enemy shot it defends pays it, so waiting for a tactic that launches and
    leaves (``skate``) to spend its missile first is worth something before the kill that
    follows. Being a potential's difference that returns to 0 when a fighter dies, its episode
    total is ``−Φ`` at the start (0 for the rules' even start) for a fight won or lost, and the
    balance at the end for a draw: it does not change the price of a win or a loss, only which
    draws are the worse. In-flight missiles are read from the observation's slots
    (``obs_incoming_missiles``, ``obs_own_missiles``), so a missile beyond them counts from the
    moment it enters one.
    """

    def __init__(self, device: torch.device | str = "cpu", layout: ObsLayout | None = None,
                 sim_config: SimConfig | None = None):
        super().__init__(device)
        layout = layout if layout is not None else ObsLayout(1, 1)
        config = sim_config if sim_config is not None else SimConfig()
        self.per_missile = 1.0 / config.missiles_per_fighter
        self.i_alive = [layout.index("own.alive"), layout.index("enemy.alive")]
        self.i_left = [layout.index("own.missiles_left"), layout.index("enemy.missiles_left")]
        self.i_own_flying = [layout.index(f"own_missile[{i}].present") for i in range(layout.own_missiles)]
        self.i_incoming = [layout.index(f"incoming[{i}].present") for i in range(layout.incoming)]

    def potential(self, obs: torch.Tensor) -> torch.Tensor:
        """``Φ`` of each observation ``[N]``: the missile balance while both fighters live, else 0."""
        f = obs.float()
        own = f[:, self.i_left[0]] + self.per_missile * (f[:, self.i_own_flying] > 0.5).sum(-1)
        enemy = f[:, self.i_left[1]] + self.per_missile * (f[:, self.i_incoming] > 0.5).sum(-1)
        both = (f[:, self.i_alive[0]] > 0.5) & (f[:, self.i_alive[1]] > 0.5)
        return torch.where(both, own - enemy, 0.0)


@dataclass(frozen=True)
class ShapedConfig:
    """Weights of the ``shaped`` reward. Defaults keep every dense term's whole-episode total
    far below the outcome's ±1: at most 0.12 (aim) + 0.085 (closing) + 0.06 (launches)."""

    outcome_weight: float = 1.0
    """Weight of the environment's outcome reward."""
    aim_weight: float = 0.0002
    """Per decision step, times the cosine of the enemy's bearing off the nose (−1..1): a hint
    to point at the enemy. 600 steps give at most ±0.12."""
    closing_weight: float = 0.02
    """Times the decrease of the range in units of 50 km: a potential-based term whose episode
    total telescopes to ``closing_weight · (first range − last range) / 50 km``, bounded by the
    arena's diagonal (≈ 4.2 units, i.e. ±0.085), so it cannot change the optimal policy."""
    launch_cost: float = 0.01
    """Subtracted per own launch: missiles are finite (6 launches cost 0.06)."""

    def __post_init__(self) -> None:
        for name in ("outcome_weight", "aim_weight", "closing_weight", "launch_cost"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"ShapedConfig.{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"ShapedConfig.{name} must be finite, got {value!r}")


class ShapedReward(BaseReward):
    """Outcome plus small dense terms (weights in :class:`ShapedConfig`):

    ``outcome_weight · outcome + aim_weight · cos(bearing after) + closing_weight · (range
    before − range after) − launch_cost · launches``, ranges in observation units (50 km).
    """

    def __init__(
        self,
        device: torch.device | str = "cpu",
        config: ShapedConfig | None = None,
        layout: ObsLayout | None = None,
    ):
        super().__init__(device)
        self.config = config if config is not None else ShapedConfig()
        # The enemy block's offsets do not depend on the missile counts, so any layout works.
        layout = layout if layout is not None else ObsLayout(1, 1)
        self.i_range = layout.index("enemy.range")
        self.i_bearing_cos = layout.index("enemy.bearing_cos")
        self.i_own_alive = layout.index("own.alive")

    def dense(self, obs_before, obs_after, action, done, info: StepInfo) -> torch.Tensor:
        """The dense terms alone ``[N]`` (no outcome)."""
        check_inputs(obs_before, obs_after, action, done, info)
        cfg = self.config
        alive = obs_after[:, self.i_own_alive].float()
        aim = cfg.aim_weight * obs_after[:, self.i_bearing_cos].float() * alive
        closing = cfg.closing_weight * (obs_before[:, self.i_range] - obs_after[:, self.i_range]).float()
        launches = cfg.launch_cost * info["launches"].float()
        return aim + closing - launches

    def compute(self, obs_before, obs_after, action, done, info: StepInfo) -> torch.Tensor:
        """Outcome plus the dense terms."""
        dense = self.dense(obs_before, obs_after, action, done, info)
        return self.config.outcome_weight * info["reward"].float() + dense
