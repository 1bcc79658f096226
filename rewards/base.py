"""The reward interface, the info it receives, and weighted sums of rewards.

A reward plug-in turns one decision step of the learning side into a scalar per environment.
It sees the learning side's observation before and after the step (the final observation where
the episode ended), the action taken, the done flags and the simulator's step info for that
side. The environment's own reward is only the outcome; everything else is a plug-in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypedDict, cast

import torch

from sim.device import canonical_device


class StepInfo(TypedDict):
    """Per-environment step information for the learning side, all ``[N]`` tensors."""

    reward: torch.Tensor
    """The environment's outcome reward for the learning side: +1 win, −1 loss, 0 otherwise."""
    terminated: torch.Tensor
    """Bool: the episode ended by an outcome (not by the time limit)."""
    truncated: torch.Tensor
    """Bool: the episode hit the time limit."""
    winner: torch.Tensor
    """int64: −1 running, 0 red, 1 blue, 2 draw."""
    end_reason: torch.Tensor
    """int64: 0 none, 1 kill, 2 mutual_kill, 3 out_of_arena, 4 ammo_out, 5 time_limit."""
    launches: torch.Tensor
    """int64: missiles the learning side launched in this decision step."""
    hits: torch.Tensor
    """int64: hits the learning side scored in this decision step."""


def step_info(result, side: int) -> StepInfo:
    """The :class:`StepInfo` of one side from a simulator ``StepResult`` (views, not copies:
    the simulator overwrites them at its next step)."""
    if side not in (0, 1):
        raise ValueError(f"side must be 0 (red) or 1 (blue), got {side!r}")
    return StepInfo(
        reward=result.reward[:, side], terminated=result.terminated, truncated=result.truncated,
        winner=result.winner, end_reason=result.end_reason, launches=result.launches[:, side],
        hits=result.hits[:, side],
    )


def check_inputs(
    obs_before: torch.Tensor, obs_after: torch.Tensor, action: torch.Tensor, done: torch.Tensor, info: StepInfo
) -> int:
    """Validate the arguments of :meth:`BaseReward.compute`; returns N."""
    if obs_before.dim() != 2:
        raise ValueError(f"obs_before must have shape (N, D), got {tuple(obs_before.shape)}")
    n = obs_before.shape[0]
    if obs_after.shape != obs_before.shape:
        raise ValueError(f"obs_after must have shape {tuple(obs_before.shape)}, got {tuple(obs_after.shape)}")
    if action.dim() != 2 or action.shape[0] != n:
        raise ValueError(f"action must have shape ({n}, 3), got {tuple(action.shape)}")
    if done.shape != (n,) or done.dtype != torch.bool:
        raise ValueError(f"done must be a bool tensor of shape ({n},), got {done.dtype} {tuple(done.shape)}")
    missing = [k for k in StepInfo.__annotations__ if k not in info]
    if missing:
        raise ValueError(f"info is missing key(s): {', '.join(missing)}")
    # Every StepInfo field is a tensor: read the info as a mapping of tensors by name.
    fields = cast(Mapping[str, torch.Tensor], info)
    for key in StepInfo.__annotations__:
        if fields[key].shape != (n,):
            raise ValueError(f"info[{key!r}] must have shape ({n},), got {tuple(fields[key].shape)}")
    return n


def check_reward_output(reward: torch.Tensor, num_envs: int, who: str) -> torch.Tensor:
    """Check a reward plug-in's output where it enters the pipeline; returns a 0-dim bool
    tensor on the reward's device, True when some value is NaN or infinite.

    The type, shape and dtype are metadata: anything but a floating-point ``[num_envs]`` tensor
    raises ``ValueError`` naming ``who`` at once (a 0-dim reward would otherwise be broadcast to
    every environment, an integer one silently converted). Values are data: they are checked
    on the device without a host read, and the caller ORs the result into a flag it reads at a
    chunk boundary.
    """
    _check_reward_metadata(reward, num_envs, who)
    return ~torch.isfinite(reward).all()


def _check_reward_metadata(reward: torch.Tensor, num_envs: int, who: str) -> None:
    if not isinstance(reward, torch.Tensor):
        raise ValueError(f"{who} returned {type(reward).__name__}, not a torch.Tensor")
    if tuple(reward.shape) != (num_envs,):
        raise ValueError(
            f"{who} returned a reward of shape {tuple(reward.shape)}, expected ({num_envs},): "
            "one value per environment"
        )
    if not reward.is_floating_point():
        raise ValueError(f"{who} returned a {reward.dtype} reward; rewards are floating point")


def bad_reward_message(who: str) -> str:
    """The error for a True :func:`check_reward_output` flag, read at a chunk boundary."""
    return f"{who} returned non-finite rewards (NaN or infinity)"


class BaseReward:
    """Computes a per-environment reward ``[N]`` for one decision step of the learning side.

    Subclasses implement :meth:`compute`; rewards with per-environment state override
    :meth:`reset`; rewards holding tensors override :meth:`to`.
    """

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = canonical_device(device)

    def compute(
        self,
        obs_before: torch.Tensor,
        obs_after: torch.Tensor,
        action: torch.Tensor,
        done: torch.Tensor,
        info: StepInfo,
    ) -> torch.Tensor:
        """Reward ``[N]`` (float32) of this decision step."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute()")

    def reset(self, env_mask: torch.Tensor | None = None) -> None:
        """Clear per-environment state where ``env_mask`` is true (all when None)."""

    def generators(self) -> list[torch.Generator]:
        """The random generators :meth:`compute` draws from, besides the default one (see
        ``agents.BaseAgent.generators``)."""
        return []

    def to(self, device: torch.device | str) -> BaseReward:
        """Move to ``device``; returns self."""
        self.device = canonical_device(device)
        return self


class WeightedSum(BaseReward):
    """``Σ_k w_k · r_k`` over reward terms, e.g. ``WeightedSum([(1.0, Outcome()), (0.5, Shaped())])``.

    Weights must be finite. Every term's output must be a floating-point ``[N]`` tensor (checked
    as it is computed, so a wrong term is named instead of being broadcast into the sum); a
    non-finite value in any term makes the sum non-finite, which the caller's check sees.
    """

    def __init__(self, terms: Sequence[tuple[float, BaseReward]], device: torch.device | str = "cpu"):
        super().__init__(device)
        if not terms:
            raise ValueError("WeightedSum needs at least one (weight, reward) term")
        checked = []
        for i, term in enumerate(terms):
            if not (isinstance(term, tuple) and len(term) == 2):
                raise ValueError(f"term {i} must be a (weight, reward) pair, got {term!r}")
            weight, reward = term
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise ValueError(f"term {i} weight must be a number, got {weight!r}")
            if not math.isfinite(weight):
                raise ValueError(f"term {i} weight must be finite, got {weight!r}")
            if not isinstance(reward, BaseReward):
                raise ValueError(f"term {i} must hold a BaseReward, got {type(reward).__name__}")
            checked.append((float(weight), reward.to(self.device)))
        self.terms = checked

    def compute(self, obs_before, obs_after, action, done, info) -> torch.Tensor:
        """The weighted sum of every term's reward."""
        n = obs_before.shape[0]
        total: torch.Tensor | None = None
        # The constructor refuses an empty list, so the loop runs at least once.
        for i, (weight, reward) in enumerate(self.terms):
            term = reward.compute(obs_before, obs_after, action, done, info)
            _check_reward_metadata(term, n, f"reward term {i} ({type(reward).__name__})")
            total = weight * term if total is None else total + weight * term
        assert total is not None
        return total

    def reset(self, env_mask: torch.Tensor | None = None) -> None:
        """Reset every term."""
        for _, reward in self.terms:
            reward.reset(env_mask)

    def to(self, device: torch.device | str) -> WeightedSum:
        """Move every term."""
        super().to(device)
        for _, reward in self.terms:
            reward.to(device)
        return self
