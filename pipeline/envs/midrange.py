"""``Midrange-v0`` built from specs: the entry points ``import sim`` registers.

``gymnasium.make("Midrange-v0", opponent="ace", reward="outcome", scenario="random",
time_scale=1.0)`` lands in :func:`make_env`, ``gymnasium.make_vec("Midrange-v0", num_envs=N,
vectorization_mode="vector_entry_point", ...)`` in :func:`make_vector_env`. The opponent is any
agent spec the launcher takes (a scripted name, a champion such as ``ace2``, a checkpoint,
``package.module:factory``) or an agent object; the reward any reward spec (``outcome``,
``shaped``, ``outcome+0.1*shaped``, an import path). The envs themselves (``sim.envs.gym``)
take objects only; specs are resolved here, the first floor that sees agents, rewards and the
learner (a checkpoint or a champion needs the learner to load).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from agents.base import BaseAgent
from agents.champions import CHAMPIONS
from learner.checkpoint import read_checkpoint
from learner.spaces import ActionSpec
from pipeline.config.specs import build_agent, make_reward
from rewards.base import BaseReward, step_info
from sim.batched import StepResult
from sim.config import SimConfig
from sim.envs.gym import MidrangeEnv, MidrangeVectorEnv, Opponent, StepReward
from sim.layout import ObsLayout

__all__ = ["DEFAULT_OPPONENT", "DEFAULT_REWARD", "FALLBACK_OPPONENT", "build_opponent", "build_reward",
           "default_opponent", "make_env", "make_vector_env"]

DEFAULT_OPPONENT = "ace2"
"""The opponent of ``Midrange-v0`` unless told otherwise: the strongest packaged champion
(``agents.champions``), ``ace2``, the league bench's fighter taught by ``ace``, which beats
every scripted agent and most of the held-out tactics (bench/RESULTS.md, "The champion as the
league's teacher: ace2"). Before it the default was ``ace``, before that ``crank``, the
strongest scripted agent, and before that ``pursuit``, which never fires."""

FALLBACK_OPPONENT = "crank"
"""The default opponent of a simulator the champion cannot fly (the continuous action mode, or
observations of another layout than its own): the strongest scripted agent, which flies any."""

DEFAULT_REWARD = "outcome"
"""Red's reward unless told otherwise: +1 win, −1 loss, 0 otherwise."""

SPEC_KINDS = ("a scripted name (straight, pursuit, shooter, crank, random), a champion (ace, ace2, ace3), a checkpoint "
              "(.pt file, checkpoints folder or run directory) or 'package.module:factory'")


@functools.cache
def _champion_fits(name: str, config: SimConfig) -> bool:
    """Whether the champion ``name`` can fly ``config``: its actions, and its observation layout
    or the frame before the sim's memory and reach block (``ObsLayout.reads``)."""
    state = read_checkpoint(CHAMPIONS[name])
    actions = ActionSpec.from_dict(state["model_kwargs"]["action_spec"])
    saved = state.get("obs_layout")
    reads = isinstance(saved, dict) and ObsLayout.reads(saved, ObsLayout.from_config(config).metadata()) is not None
    return reads and actions == ActionSpec.for_sim(config)


def default_opponent(config: SimConfig) -> str:
    """The opponent ``Midrange-v0`` flies when none is named: :data:`DEFAULT_OPPONENT` where it
    can fly ``config`` (its observation layout and action mode), else :data:`FALLBACK_OPPONENT`.
    Named explicitly, ``ace`` on such a simulator is refused in one line."""
    return DEFAULT_OPPONENT if _champion_fits(DEFAULT_OPPONENT, config) else FALLBACK_OPPONENT


class RedReward:
    """A ``rewards.BaseReward`` scoring red's transitions, as the ``sim.envs.gym.StepReward`` the
    envs call (the simulator's step info of side 0, as the actors hand it)."""

    def __init__(self, reward: BaseReward) -> None:
        self.reward = reward

    def __call__(self, obs_before: torch.Tensor, obs_after: torch.Tensor, action: torch.Tensor,
                 result: StepResult) -> torch.Tensor:
        """Red's reward ``[N]`` for this step."""
        return self.reward.compute(obs_before, obs_after, action, result.done, step_info(result, 0))

    def reset(self, env_mask: torch.Tensor) -> None:
        """Reset the reward's per-duel state where ``env_mask`` is true."""
        self.reward.reset(env_mask)


def build_opponent(
    opponent: str | Opponent, num_envs: int, config: SimConfig, device: torch.device | str = "cpu",
    *, seed: int = 0,
) -> Opponent:
    """Blue's flyer for ``num_envs`` duels: built from a spec string, or an object with
    ``act``/``reset``/``generators`` passed through (a ``BaseAgent`` must be batched over
    ``num_envs`` and act in the sim's action mode). A bad spec is a one-line ``ValueError``
    naming it: an unknown name, a missing or damaged checkpoint, an import path that fails."""
    if isinstance(opponent, str):
        layout = ObsLayout.from_config(config)
        try:
            return build_agent(opponent, num_envs, layout, device, seed=seed,
                               action_mode=config.action_mode, sim_config=config).eval()
        except ValueError as exc:
            raise ValueError(f"Midrange-v0 opponent {opponent!r}: {exc}") from None
        except Exception as exc:  # a plug-in's constructor: its error, in one line
            raise ValueError(f"Midrange-v0 opponent {opponent!r}: building it raised "
                             f"{type(exc).__name__}: {exc}") from None
    if isinstance(opponent, BaseAgent):
        if opponent.num_envs != num_envs:
            raise ValueError(f"Midrange-v0 opponent {type(opponent).__name__} flies "
                             f"{opponent.num_envs} duels, the env has {num_envs}")
        if opponent.action_mode != config.action_mode:
            raise ValueError(f"Midrange-v0 opponent {type(opponent).__name__} acts in action_mode "
                             f"{opponent.action_mode!r}, the env's is {config.action_mode!r}")
        return opponent
    if all(callable(getattr(opponent, m, None)) for m in ("act", "reset", "generators")):
        return opponent
    raise ValueError(f"Midrange-v0 opponent must be {SPEC_KINDS}, or an agent object with act(), "
                     f"reset() and generators(); got {type(opponent).__name__}")


def build_reward(reward: str | StepReward, config: SimConfig, device: torch.device | str = "cpu") -> StepReward:
    """Red's reward: built from a spec string (``rewards.registry.make_reward``), a
    ``BaseReward`` wrapped, or a ``sim.envs.gym.StepReward`` passed through."""
    if isinstance(reward, str):
        try:
            return RedReward(make_reward(reward, device, ObsLayout.from_config(config), config))
        except ValueError as exc:
            raise ValueError(f"Midrange-v0 reward {reward!r}: {exc}") from None
    if isinstance(reward, BaseReward):
        return RedReward(reward.to(device))
    if callable(reward) and callable(getattr(reward, "reset", None)):
        return reward
    raise ValueError("Midrange-v0 reward must be a reward spec ('outcome', 'shaped', "
                     "'outcome+0.1*shaped', 'package.module:Class'), a rewards.BaseReward or a "
                     f"sim.envs.gym.StepReward; got {type(reward).__name__}")


def _split(config: SimConfig | None, kwargs: dict[str, Any]) -> tuple[SimConfig, dict[str, Any]]:
    """The simulator's settings (``config`` with the ``SimConfig`` fields among ``kwargs``) and
    the other keyword arguments, which are the env constructor's (e.g. ``render_env``)."""
    names = {f.name for f in dataclasses.fields(SimConfig)}
    overrides = {k: v for k, v in kwargs.items() if k in names}
    base = config if config is not None else SimConfig()
    return (base.replace(**overrides) if overrides else base), {k: v for k, v in kwargs.items() if k not in names}


def make_env(
    opponent: str | Opponent | None = None,
    reward: str | StepReward = DEFAULT_REWARD,
    config: SimConfig | None = None,
    render_mode: str | None = None,
    seed: int = 0,
    **kwargs: Any,
) -> MidrangeEnv:
    """One duel, red against ``opponent``, scored by ``reward``.

    Args:
        opponent: who flies blue: an agent spec as ``pipeline.launch --opponent`` takes it, or
            an agent object for one duel. Default (None): ``ace``, the packaged champion, on a
            simulator it can fly, else ``crank`` (:func:`default_opponent`).
        reward: red's reward: a spec as ``pipeline.launch --reward`` takes it, a
            ``BaseReward`` or a ``StepReward``. Default ``outcome``.
        config: the simulator's settings; ``kwargs`` that are ``SimConfig`` fields go on top of
            it, e.g. ``scenario="head_on"``, ``time_scale=2.0``, ``action_mode="continuous"``;
            any others go to the env's constructor.
        render_mode: passed to the env.
        seed: the seed a stochastic opponent (``random``, a sampling checkpoint) is built with;
            ``reset(seed=s)`` reseeds it from ``s``.
    """
    cfg, env_kwargs = _split(config, kwargs)
    blue = build_opponent(default_opponent(cfg) if opponent is None else opponent, 1, cfg, seed=seed)
    score = build_reward(reward, cfg)
    return MidrangeEnv(cfg, render_mode=render_mode, opponent=blue, reward=score, **env_kwargs)


def make_vector_env(
    num_envs: int,
    opponent: str | Opponent | None = None,
    reward: str | StepReward = DEFAULT_REWARD,
    config: SimConfig | None = None,
    device: str = "cpu",
    compile: bool = False,
    render_mode: str | None = None,
    seed: int = 0,
    **kwargs: Any,
) -> MidrangeVectorEnv:
    """``num_envs`` duels in one batched sim on ``device``, red against ``opponent`` (batched
    over all of them), scored by ``reward``; the arguments as in :func:`make_env`."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
    cfg, env_kwargs = _split(config, kwargs)
    blue = build_opponent(default_opponent(cfg) if opponent is None else opponent, num_envs, cfg,
                          device, seed=seed)
    score = build_reward(reward, cfg, device)
    return MidrangeVectorEnv(num_envs, cfg, device=device, compile=compile, render_mode=render_mode,
                             opponent=blue, reward=score, **env_kwargs)


# gymnasium.make reads the entry point's metadata (render modes) before calling it.
make_env.metadata = MidrangeEnv.metadata  # type: ignore[attr-defined]
make_vector_env.metadata = MidrangeVectorEnv.metadata  # type: ignore[attr-defined]
