"""The unit of experience the learner consumes: one rollout chunk of T steps × B environments."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor


@dataclass
class RolloutBatch:
    """T steps × B environments of experience from one behaviour policy version per column.

    Step ``t`` of column ``b`` is the transition from ``obs[t, b]`` under ``actions[t, b]``.
    Where an episode ended at step ``t`` (terminated or truncated), the next row holds the first
    observation of a new episode; the value of the *final* observation of a truncated episode is
    in ``bootstrap_values[t, b]`` (ignored elsewhere), and the value of the observation after
    the last step is in ``next_values[b]``.
    """

    obs: Tensor
    """Observations ``[T, B, D]`` (float)."""
    actions: Tensor
    """Actions taken ``[T, B, A]`` (int64 for discrete kinds, float for continuous)."""
    log_probs: Tensor
    """Behaviour log-probabilities of the actions ``[T, B]``."""
    values: Tensor
    """Behaviour value estimates of ``obs`` ``[T, B]``."""
    rewards: Tensor
    """Rewards ``[T, B]``."""
    terminated: Tensor
    """Episode ended by the task at step t ``[T, B]`` bool (no bootstrap)."""
    truncated: Tensor
    """Episode cut off (time limit) at step t ``[T, B]`` bool (bootstrap from the final obs)."""
    bootstrap_values: Tensor
    """Value of the final observation ``[T, B]``; used where truncated."""
    next_values: Tensor
    """Value of the observation following the last step ``[B]``."""
    policy_versions: Tensor
    """Policy version that produced each column ``[B]`` int64."""

    @property
    def num_steps(self) -> int:
        """T."""
        return int(self.obs.shape[0])

    @property
    def num_envs(self) -> int:
        """B."""
        return int(self.obs.shape[1])

    @property
    def num_samples(self) -> int:
        """T · B."""
        return self.num_steps * self.num_envs

    @property
    def device(self) -> torch.device:
        """Device of the observations."""
        return self.obs.device

    def validate(self, obs_dim: int | None = None, action_dim: int | None = None) -> None:
        """Raise ``ValueError`` naming the first field whose shape, dtype or device is wrong."""
        if self.obs.dim() != 3:
            raise ValueError(f"obs must have shape (T, B, D), got {tuple(self.obs.shape)}")
        t, b, d = self.obs.shape
        if obs_dim is not None and d != obs_dim:
            raise ValueError(f"obs must have shape (T, B, {obs_dim}), got {tuple(self.obs.shape)}")
        if not self.obs.is_floating_point():
            raise ValueError(f"obs must be floating point, got {self.obs.dtype}")
        a = action_dim if action_dim is not None else (self.actions.shape[-1] if self.actions.dim() == 3 else -1)
        expected = {
            "actions": (t, b, a),
            "log_probs": (t, b),
            "values": (t, b),
            "rewards": (t, b),
            "terminated": (t, b),
            "truncated": (t, b),
            "bootstrap_values": (t, b),
            "next_values": (b,),
            "policy_versions": (b,),
        }
        for name, shape in expected.items():
            value = getattr(self, name)
            if not isinstance(value, Tensor):
                raise ValueError(f"{name} must be a tensor, got {type(value).__name__}")
            if tuple(value.shape) != shape:
                want = ", ".join("A" if s == -1 else str(s) for s in shape)
                raise ValueError(f"{name} must have shape ({want}), got {tuple(value.shape)}")
            if value.device != self.obs.device:
                raise ValueError(f"{name} is on {value.device} but obs is on {self.obs.device}")
        for name in ("terminated", "truncated"):
            if getattr(self, name).dtype != torch.bool:
                raise ValueError(f"{name} must be bool, got {getattr(self, name).dtype}")
        for name in ("log_probs", "values", "rewards", "bootstrap_values", "next_values"):
            if not getattr(self, name).is_floating_point():
                raise ValueError(f"{name} must be floating point, got {getattr(self, name).dtype}")
        if self.policy_versions.dtype != torch.int64:
            raise ValueError(f"policy_versions must be int64, got {self.policy_versions.dtype}")

    def to(self, device: torch.device | str, non_blocking: bool = False) -> RolloutBatch:
        """A copy of every tensor on ``device`` (``non_blocking`` for pinned-host sources)."""
        return RolloutBatch(**{
            f.name: getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)
        })
