"""The two-sided duel for multi-agent learning: a PettingZoo ``ParallelEnv`` and a batched form.

Agents ``red`` and ``blue`` each observe their own egocentric view (sim/layout.py), act in the
sim's action mode (``MultiDiscrete([3, 3, 2])`` or a Box, as ``Midrange-v0``) and get their own
outcome reward (+1 win, −1 loss, 0 otherwise)::

    from sim.envs.pettingzoo import parallel_env
    env = parallel_env(scenario="head_on")          # SimConfig fields as keyword arguments
    observations, infos = env.reset(seed=0)
    while env.agents:
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        observations, rewards, terminations, truncations, infos = env.step(actions)

A duel ends for both sides in the same step (a kill ends it; nobody flies on alone), so after
that step ``env.agents`` is empty and ``reset()`` starts the next episode. ``reset(seed=s)``
starts the episodes of seed ``s`` again: the same seed and actions give the same trajectory.
Refused, each with a ``ValueError`` naming the agent: an action for an agent that is done (its
episode ended; call ``reset()``), a missing action for a live agent, an unknown agent, an
action of the wrong shape or kind.

:class:`DuelBatchEnv` (:func:`batched_env`) is the same duel ``N`` times in one batched sim, for
self-play at scale: dicts of ``[N, ...]`` arrays per agent, same-step auto-reset as
``sim.envs.gym.MidrangeVectorEnv`` (the ended episode's last observations in
``infos[agent]["final_obs"]``). PettingZoo has no vector API, so it is not a ``ParallelEnv``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from pettingzoo import ParallelEnv

from sim.actions import action_tensor
from sim.batched import BatchedSim, StepResult
from sim.config import SimConfig
from sim.envs.gym import action_space, observation_space
from sim.kernels import END_REASONS, WINNERS

AGENTS = ("red", "blue")
"""The agents, in side order: red is side 0, blue side 1."""

__all__ = ["AGENTS", "DuelBatchEnv", "DuelParallelEnv", "batched_env", "parallel_env"]


def _config(config: SimConfig | None, overrides: dict[str, Any]) -> SimConfig:
    base = config if config is not None else SimConfig()
    return base.replace(**overrides) if overrides else base


def _check_render_mode(render_mode: str | None) -> None:
    if render_mode is not None:
        raise ValueError(f"render_mode must be None (no renderer for the duel envs), got {render_mode!r}")


def _agent_info(out: StepResult, side: int) -> dict[str, Any]:
    return {
        "winner": WINNERS[int(out.winner[0])],
        "end_reason": END_REASONS[int(out.end_reason[0])],
        "launches": int(out.launches[0, side]),
        "hits": int(out.hits[0, side]),
    }


class _DuelSpaces:
    """Both agents' spaces, built once: ``observation_space(agent)`` returns the same object
    every time (PettingZoo's API test asks for it; seeding a space must stick)."""

    possible_agents: list[str]
    observation_spaces: dict[str, spaces.Box]
    action_spaces: dict[str, spaces.Space]

    def _init_spaces(self, sim: BatchedSim) -> None:
        self.possible_agents = list(AGENTS)
        self.observation_spaces = {a: observation_space(sim.layout) for a in AGENTS}
        self.action_spaces = {a: action_space(sim.config) for a in AGENTS}

    def _check_agent(self, agent: str) -> None:
        if agent not in AGENTS:
            raise ValueError(f"unknown agent {agent!r}: the agents are {', '.join(AGENTS)}")

    def observation_space(self, agent: str) -> spaces.Box:
        """``agent``'s observation space (egocentric, the same layout for both)."""
        self._check_agent(agent)
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        """``agent``'s action space."""
        self._check_agent(agent)
        return self.action_spaces[agent]

    def _check_keys(self, actions: Any, live: list[str]) -> None:
        if not isinstance(actions, dict):
            raise ValueError(f"actions must be a dict of agent name to action, got {type(actions).__name__}")
        for agent in actions:
            self._check_agent(agent)
        for agent in live:
            if agent not in actions:
                raise ValueError(f"no action for agent {agent!r}: every live agent acts each step")


class DuelParallelEnv(_DuelSpaces, ParallelEnv):
    """One duel, red against blue, both learning (see the module docstring).

    ``DuelParallelEnv(config=None, **SimConfig overrides)``.
    """

    # Not a ClassVar: PettingZoo declares metadata an instance attribute.
    metadata: dict[str, Any] = {"name": "midrange_duel_v0", "render_modes": [], "is_parallelizable": True}  # noqa: RUF012

    def __init__(self, config: SimConfig | None = None, render_mode: str | None = None, **overrides: Any) -> None:
        _check_render_mode(render_mode)
        self.render_mode = render_mode
        self.config = _config(config, overrides)
        self._sim = BatchedSim(1, config=self.config)
        self.layout = self._sim.layout
        self._init_spaces(self._sim)
        self.agents: list[str] = []
        self._pending: np.ndarray | None = None  # [2, D]: the next episode, started at auto-reset
        self._ended: str | None = None  # how the last episode ended, once it has
        self._current: np.ndarray | None = None  # [2, D]: the last observations returned

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        """Start an episode (of seed ``seed`` from its first, if given); both agents live."""
        if seed is not None:
            self._sim.reseed(int(seed))
            self._pending = None
        if self._pending is not None:
            obs, self._pending = self._pending, None
        else:
            obs = self._sim.reset()[0].numpy().astype(np.float32, copy=True)
        self.agents = list(AGENTS)
        self._ended = None
        self._current = obs
        return {a: obs[i].copy() for i, a in enumerate(AGENTS)}, {a: {} for a in AGENTS}

    def step(self, actions: dict[str, Any]) -> tuple[
        dict[str, np.ndarray], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]
    ]:
        """Both live agents act; returns each one's observation, reward, termination,
        truncation and info (``winner``, ``end_reason``, its ``launches`` and ``hits``)."""
        if self._current is None:
            raise RuntimeError("call reset() before step()")
        if not self.agents:
            named = [a for a in actions if a in AGENTS] if isinstance(actions, dict) else []
            who = f"agent {named[0]!r} is" if named else "both agents are"
            raise ValueError(f"{who} done: the episode ended ({self._ended}); call reset() to start the next")
        self._check_keys(actions, self.agents)
        sides = [action_tensor(actions[a], self.config.action_mode, (3,), self._sim.dtype, self._sim.device,
                               who=f"action of agent {a!r}") for a in AGENTS]
        out = self._sim.step(torch.stack(sides).view(1, 2, 3))
        final = out.final_obs[0].numpy().astype(np.float32, copy=True)
        terminated, truncated = bool(out.terminated[0]), bool(out.truncated[0])
        self._current = final
        observations = {a: final[i].copy() for i, a in enumerate(AGENTS)}
        rewards = {a: float(out.reward[0, i]) for i, a in enumerate(AGENTS)}
        infos = {a: _agent_info(out, i) for i, a in enumerate(AGENTS)}
        if terminated or truncated:
            self.agents = []
            self._ended = infos["red"]["end_reason"]
            self._pending = out.obs[0].numpy().astype(np.float32, copy=True)
        return (observations, rewards, dict.fromkeys(AGENTS, terminated), dict.fromkeys(AGENTS, truncated),
                infos)

    def render(self) -> None:
        """No renderer: ``render_mode`` is always None."""
        return None

    def close(self) -> None:
        """Nothing to release."""

    def state(self) -> np.ndarray:
        """Both sides' observations concatenated, red's first (a centralized critic's input)."""
        if self._current is None:
            raise RuntimeError("call reset() before state()")
        return self._current.reshape(-1).copy()


class DuelBatchEnv(_DuelSpaces):
    """``num_duels`` duels in one batched sim on ``device``, both sides driven from outside
    (see the module docstring); numpy in and out, same-step auto-reset."""

    metadata: dict[str, Any] = {"name": "midrange_duel_batch_v0", "render_modes": []}  # noqa: RUF012

    def __init__(
        self, num_duels: int, config: SimConfig | None = None, device: str = "cpu", compile: bool = False,
        **overrides: Any,
    ) -> None:
        self.config = _config(config, overrides)
        self.num_duels = num_duels
        self._sim = BatchedSim(num_duels, config=self.config, device=device, compile=compile)
        self.layout = self._sim.layout
        self._init_spaces(self._sim)
        self.agents = list(AGENTS)
        self._started = False

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        """Start every duel's episode (of seed ``seed`` from its first, if given); ``options``
        may hold ``reset_mask`` (bool ``[N]``) to restart only some."""
        if seed is not None:
            self._sim.reseed(int(seed))
        mask = None
        if options is not None and "reset_mask" in options:
            mask = torch.as_tensor(np.asarray(options["reset_mask"], dtype=bool), device=self._sim.device)
        obs = self._sim.reset(mask).cpu().numpy().astype(np.float32)
        self._started = True
        return {a: obs[:, i] for i, a in enumerate(AGENTS)}, {a: {} for a in AGENTS}

    def step(self, actions: dict[str, Any]) -> tuple[
        dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray],
        dict[str, dict[str, Any]]
    ]:
        """Both agents' actions ``[N, 3]``; returns per agent: observations ``[N, D]`` (of the
        next episode where one ended), rewards, terminations and truncations ``[N]``, and infos
        (``final_obs`` valid where ``_final_obs``, ``winner``, ``end_reason``)."""
        if not self._started:
            raise RuntimeError("call reset() before step()")
        self._check_keys(actions, list(AGENTS))
        n = self.num_duels
        sides = [action_tensor(actions[a], self.config.action_mode, (n, 3), self._sim.dtype, self._sim.device,
                               who=f"actions of agent {a!r}") for a in AGENTS]
        out = self._sim.step(torch.stack(sides, dim=1))
        obs = out.obs.cpu().numpy().astype(np.float32)
        final = out.final_obs.cpu().numpy().astype(np.float32)
        reward = out.reward.cpu().numpy().astype(np.float32)
        terminated, truncated, done = (t.cpu().numpy() for t in (out.terminated, out.truncated, out.done))
        winner, reason = out.winner.cpu().numpy(), out.end_reason.cpu().numpy()
        infos = {a: {"final_obs": final[:, i], "_final_obs": done, "winner": winner, "end_reason": reason}
                 for i, a in enumerate(AGENTS)}
        return ({a: obs[:, i] for i, a in enumerate(AGENTS)}, {a: reward[:, i] for i, a in enumerate(AGENTS)},
                dict.fromkeys(AGENTS, terminated), dict.fromkeys(AGENTS, truncated), infos)

    def close(self) -> None:
        """Nothing to release."""


def parallel_env(config: SimConfig | None = None, render_mode: str | None = None, **overrides: Any) -> DuelParallelEnv:
    """One red-against-blue duel as a PettingZoo ``ParallelEnv`` (``SimConfig`` fields as
    keyword arguments)."""
    return DuelParallelEnv(config, render_mode=render_mode, **overrides)


def batched_env(num_duels: int, config: SimConfig | None = None, device: str = "cpu", **overrides: Any) -> DuelBatchEnv:
    """``num_duels`` red-against-blue duels in one batched sim (see :class:`DuelBatchEnv`)."""
    return DuelBatchEnv(num_duels, config, device=device, **overrides)
