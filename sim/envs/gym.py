"""Gymnasium interfaces: a single-agent ``Midrange-v0`` env and a vector env over the batched sim.

In both, the learner flies red (side 0) and observes red's egocentric view (sim/layout.py). Blue
is flown by an :class:`Opponent` object and red's reward comes from a :class:`StepReward`
object; left out, they are the built-in pursuit autopilot (sim/RULES.md, never fires) and red's
outcome reward. This floor imports nothing above it, so it takes objects, never specs:
``gymnasium.make("Midrange-v0", opponent="crank", reward="shaped")`` goes through
``pipeline.envs.midrange``, which builds both from the launcher's specs (its default opponent,
``crank``, fires).
"""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium
import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from sim.actions import DISCRETE_NVEC, action_tensor
from sim.autopilot import pursuit_actions
from sim.batched import BatchedSim, StepResult
from sim.config import SimConfig
from sim.kernels import END_REASONS
from sim.layout import OBS_CLIP, ObsLayout

RENDER_MODES = ("rgb_array",)
RENDER_FPS = 30


def _check_render_mode(render_mode: str | None) -> None:
    if render_mode is not None and render_mode not in RENDER_MODES:
        raise ValueError(f"render_mode must be None or one of {RENDER_MODES}, got {render_mode!r}")


def _frame_keeper(sim: BatchedSim, env: int, render_mode: str | None) -> Any:
    """The sim observer that keeps frames for ``render()`` (None without a render mode); the
    drawing module is imported here, only when a render mode asks for it."""
    if render_mode is None:
        return None
    from sim.envs.render import FrameKeeper

    keeper = FrameKeeper(sim.config, env)
    sim.observer = keeper
    return keeper


def _config(config: SimConfig | None, overrides: dict[str, Any]) -> SimConfig:
    base = config if config is not None else SimConfig()
    return base.replace(**overrides) if overrides else base


def observation_space(layout: ObsLayout) -> spaces.Box:
    """One flyer's observation space."""
    return spaces.Box(-OBS_CLIP, OBS_CLIP, shape=(layout.size,), dtype=np.float32)


def action_space(config: SimConfig) -> spaces.Space:
    """One flyer's action space: MultiDiscrete([3, 3, 2]) or a Box (rudder, throttle, fire)."""
    if config.action_mode == "discrete":
        return spaces.MultiDiscrete(np.array(DISCRETE_NVEC, dtype=np.int64))
    low = np.array([-1.0, 0.0, 0.0], dtype=np.float32)
    return spaces.Box(low, np.ones(3, dtype=np.float32), dtype=np.float32)


class Opponent(Protocol):
    """Flies blue in all ``N`` duels of an env at once (``agents.BaseAgent`` is one)."""

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions ``[N, 3]`` in the sim's action mode for blue's observations ``[N, D]``."""
        ...

    def reset(self, env_mask: torch.Tensor) -> None:
        """Forget per-duel memory where ``env_mask`` (bool ``[N]``) is true."""
        ...

    def generators(self) -> list[torch.Generator]:
        """The generators :meth:`act` draws from; ``reset(seed=...)`` reseeds them."""
        ...


class StepReward(Protocol):
    """Red's reward ``[N]`` (floating point) for one decision step of ``N`` duels."""

    def __call__(
        self, obs_before: torch.Tensor, obs_after: torch.Tensor, action: torch.Tensor, result: StepResult
    ) -> torch.Tensor:
        """``obs_after`` is the ended episode's last observation where ``result.done``."""
        ...

    def reset(self, env_mask: torch.Tensor) -> None:
        """Forget per-duel state where ``env_mask`` (bool ``[N]``) is true."""
        ...


class PursuitOpponent:
    """The built-in pursuit autopilot (sim/RULES.md) as an :class:`Opponent`: never fires."""

    def __init__(self, layout: ObsLayout, action_mode: str = "discrete") -> None:
        self.layout = layout
        self.action_mode = action_mode

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Pursuit actions ``[N, 3]`` in this opponent's action mode."""
        return encode_discrete(pursuit_actions(obs, self.layout), self.action_mode, obs.dtype)

    def reset(self, env_mask: torch.Tensor) -> None:
        """Nothing to forget."""

    def generators(self) -> list[torch.Generator]:
        """None: pursuit is deterministic."""
        return []


def encode_discrete(actions: torch.Tensor, action_mode: str, dtype: torch.dtype) -> torch.Tensor:
    """Discrete indices ``[N, 3]`` as the actions of ``action_mode`` (levels in continuous)."""
    if action_mode == "discrete":
        return actions
    levels = torch.tensor([-1.0, 0.0, 1.0], dtype=dtype, device=actions.device)
    return torch.stack([levels[actions[:, 0]], actions[:, 1].to(dtype) * 0.5, actions[:, 2].to(dtype)], dim=-1)


def seed_generators(generators: list[torch.Generator], seed: int) -> None:
    """Seed each of ``generators`` from ``seed`` (distinct streams, same seed same draws)."""
    for i, g in enumerate(generators):
        g.manual_seed((seed * 1_000_003 + 7919 * (i + 1)) % (1 << 63))


def opponent_actions(opponent: Opponent, obs: torch.Tensor, action_mode: str) -> torch.Tensor:
    """``opponent``'s actions for blue's observations ``[N, D]``, refused with a ``ValueError``
    naming it when they are not an ``[N, 3]`` tensor of the sim's action kind."""
    actions = opponent.act(obs)
    who = f"opponent {type(opponent).__name__}"
    if not isinstance(actions, torch.Tensor):
        raise ValueError(f"{who} returned {type(actions).__name__}, not a torch.Tensor")
    if tuple(actions.shape) != (obs.shape[0], 3):
        raise ValueError(f"{who} returned actions of shape {tuple(actions.shape)}, expected ({obs.shape[0]}, 3)")
    if action_mode == "discrete" and actions.is_floating_point():
        raise ValueError(f"{who} returned {actions.dtype} actions; discrete actions are integer indices")
    if action_mode == "continuous" and not actions.is_floating_point():
        raise ValueError(f"{who} returned {actions.dtype} actions; continuous actions are floating point")
    return actions


def step_reward(
    reward: StepReward | None, obs_before: torch.Tensor, action: torch.Tensor, out: StepResult
) -> torch.Tensor:
    """Red's reward ``[N]``: ``reward``'s, checked and named when it is not ``[N]`` floats, or
    the outcome reward without one."""
    if reward is None:
        return out.reward[:, 0]
    value = reward(obs_before, out.final_obs[:, 0], action, out)
    n = obs_before.shape[0]
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != (n,) or not value.is_floating_point():
        got = f"{value.dtype} {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
        raise ValueError(f"reward {type(reward).__name__} returned {got}, expected a float tensor of shape ({n},)")
    return value


def _info(out: StepResult, i: int) -> dict[str, Any]:
    return {
        "winner": int(out.winner[i]),
        "end_reason": END_REASONS[int(out.end_reason[i])],
        "launches": int(out.launches[i, 0]),
        "hits": int(out.hits[i, 0]),
    }


class MidrangeEnv(gymnasium.Env):
    """One duel, red against ``opponent`` (default: the pursuit autopilot).

    ``MidrangeEnv(config=None, opponent=None, reward=None, **SimConfig overrides)``: the opponent
    and reward are objects for one duel (``N = 1``); ``pipeline.envs.midrange.make_env`` builds
    them from specs. ``reset(seed=s)`` reseeds the sim and the opponent's generators, so the
    same seed and actions give the same trajectory.
    """

    # Not a ClassVar: gymnasium declares metadata an instance attribute.
    metadata: dict[str, Any] = {"render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS}  # noqa: RUF012

    def __init__(
        self,
        config: SimConfig | None = None,
        render_mode: str | None = None,
        opponent: Opponent | None = None,
        reward: StepReward | None = None,
        **overrides: Any,
    ) -> None:
        _check_render_mode(render_mode)
        self.render_mode = render_mode
        self.config = _config(config, overrides)
        self._sim = BatchedSim(1, config=self.config)
        self._frames = _frame_keeper(self._sim, 0, render_mode)
        self.layout = self._sim.layout
        self.observation_space = observation_space(self.layout)
        self.action_space = action_space(self.config)
        self.opponent: Opponent = opponent if opponent is not None else PursuitOpponent(self.layout, self.config.action_mode)
        self.reward = reward
        self._obs: torch.Tensor | None = None  # [1, 2, D], both sides' current view
        self._pending: np.ndarray | None = None
        self._everyone = torch.ones(1, dtype=torch.bool)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._sim.reseed(int(seed))
            seed_generators(self.opponent.generators(), int(seed))
            self._pending = None
        if self._pending is not None:  # the sim already started the next episode at auto-reset
            obs, self._pending = self._pending, None
            if self._frames is not None:
                self._frames.begin_episode()
            return obs, {}
        self._obs = self._sim.reset().clone()
        self.opponent.reset(self._everyone)
        if self.reward is not None:
            self.reward.reset(self._everyone)
        if self._frames is not None:
            self._frames.begin_episode()
        return self._obs[0, 0].numpy().astype(np.float32, copy=True), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        red = action_tensor(action, self.config.action_mode, (3,), self._sim.dtype, self._sim.device).view(1, 3)
        blue = opponent_actions(self.opponent, self._obs[:, 1], self.config.action_mode)
        out = self._sim.step(torch.stack([red, blue.to(red.dtype)], dim=1))
        reward = float(step_reward(self.reward, self._obs[:, 0], red, out)[0])
        self.opponent.reset(out.done)
        if self.reward is not None:
            self.reward.reset(out.done)
        self._obs = out.obs.clone()
        obs = out.final_obs[0, 0].numpy().astype(np.float32, copy=True)
        terminated, truncated = bool(out.terminated[0]), bool(out.truncated[0])
        if terminated or truncated:
            self._pending = out.obs[0, 0].numpy().astype(np.float32, copy=True)
        return obs, reward, terminated, truncated, _info(out, 0)

    def render(self) -> np.ndarray | None:
        """With ``render_mode="rgb_array"``: the top-down picture (``sim.envs.render``), ``[480, 640,
        3]`` uint8; after the last step of an episode it shows how that episode ended."""
        return None if self._frames is None else self._frames.render()


class MidrangeVectorEnv(VectorEnv):
    """``num_envs`` duels on one torch device, red against ``opponent``, numpy in and out.

    ``opponent`` and ``reward`` are objects batched over ``num_envs`` on ``device`` (default:
    the pursuit autopilot and red's outcome reward); ``pipeline.envs.midrange.make_vector_env``
    builds them from specs. Autoreset mode is ``SAME_STEP``: an ended environment's returned
    observation already starts its next episode; ``info["final_obs"]`` (a dense ``[N, D]``
    array, valid where ``info["_final_obs"]``) holds the last observation of the ended one.
    """

    # Not a ClassVar: gymnasium declares metadata an instance attribute.
    metadata: dict[str, Any] = {  # noqa: RUF012
        "autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": list(RENDER_MODES), "render_fps": RENDER_FPS,
    }

    def __init__(
        self,
        num_envs: int,
        config: SimConfig | None = None,
        device: str = "cpu",
        compile: bool = False,
        render_mode: str | None = None,
        opponent: Opponent | None = None,
        reward: StepReward | None = None,
        render_env: int = 0,
        **overrides: Any,
    ) -> None:
        _check_render_mode(render_mode)
        if not 0 <= render_env < num_envs:
            raise ValueError(f"render_env must be in [0, {num_envs}), got {render_env}")
        self.render_mode = render_mode
        self.config = _config(config, overrides)
        self.num_envs = num_envs
        self._sim = BatchedSim(num_envs, config=self.config, device=device, compile=compile)
        self._frames = _frame_keeper(self._sim, render_env, render_mode)
        self.layout = self._sim.layout
        self.single_observation_space = observation_space(self.layout)
        self.single_action_space = action_space(self.config)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.opponent: Opponent = opponent if opponent is not None else PursuitOpponent(self.layout, self.config.action_mode)
        self.reward = reward
        self._obs: torch.Tensor | None = None  # [N, 2, D], both sides' current view

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        if isinstance(seed, list):
            seed = seed[0]
        if seed is not None:
            self._sim.reseed(int(seed))
            seed_generators(self.opponent.generators(), int(seed))
            self._np_random_seed = int(seed)
        mask = None
        if options is not None and "reset_mask" in options:
            mask = torch.as_tensor(np.asarray(options["reset_mask"], dtype=bool), device=self._sim.device)
        full = self._sim.reset(mask)
        self._obs = full.clone()
        everyone = mask if mask is not None else torch.ones(self.num_envs, dtype=torch.bool, device=self._sim.device)
        self.opponent.reset(everyone)
        if self.reward is not None:
            self.reward.reset(everyone)
        if self._frames is not None:
            self._frames.begin_episode()
        return full[:, 0].cpu().numpy().astype(np.float32), {}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        red = action_tensor(actions, self.config.action_mode, (self.num_envs, 3), self._sim.dtype,
                            self._sim.device, who="actions")
        blue = opponent_actions(self.opponent, self._obs[:, 1], self.config.action_mode)
        out = self._sim.step(torch.stack([red, blue.to(red.dtype)], dim=1))
        reward = step_reward(self.reward, self._obs[:, 0], red, out)
        self.opponent.reset(out.done)
        if self.reward is not None:
            self.reward.reset(out.done)
        self._obs.copy_(out.obs)
        done = out.done.cpu().numpy()
        info = {
            "final_obs": out.final_obs[:, 0].cpu().numpy().astype(np.float32),
            "_final_obs": done,
            "winner": out.winner.cpu().numpy(),
            "_winner": done,
            "end_reason": out.end_reason.cpu().numpy(),
            "_end_reason": done,
        }
        return (
            out.obs[:, 0].cpu().numpy().astype(np.float32),
            reward.detach().cpu().numpy().astype(np.float32),
            out.terminated.cpu().numpy(),
            out.truncated.cpu().numpy(),
            info,
        )

    def render(self) -> tuple[np.ndarray, ...] | None:
        """With ``render_mode="rgb_array"``: the picture of environment ``render_env`` (see
        :meth:`MidrangeEnv.render`), as a 1-tuple (a vector env's renders are one per env
        drawn); it follows that env into its next episode at once."""
        if self._frames is None:
            return None
        self._frames.begin_episode()
        return (self._frames.render(),)
