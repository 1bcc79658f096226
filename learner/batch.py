"""The unit of experience the learner consumes: T steps × B environments, fields from the schema.

The fields are those of :data:`core.schema.ROLLOUT_FIELDS` (observations, actions, behaviour
log-probs and values, rewards, terminated and truncated flags, bootstrap and next values), plus
the policy version that produced each column. Step ``t`` of column ``b`` is the transition from
``obs[t, b]`` under ``actions[t, b]``. Where an episode ended at step ``t``, the next row holds
the first observation of a new episode; the value of the *final* observation of a truncated
episode is in ``bootstrap_values[t, b]`` (ignored elsewhere), and the value of the observation
after the last step in ``next_values[b]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from core.schema import Rollout, RolloutSpec, check_rollout, rollout_fields


class RolloutBatch(Rollout):
    """A rollout the learner trains on: every schema field plus ``policy_versions`` ``[B]``.

    Built from keyword tensors (``RolloutBatch(obs=..., actions=..., ..., policy_versions=...)``)
    or from a preallocated :class:`core.schema.Rollout` with :meth:`of`.
    """

    def __init__(self, policy_versions: Tensor, spec: RolloutSpec | None = None,
                 block: Tensor | None = None, **tensors: Tensor) -> None:
        if spec is None:
            t, b = check_rollout(tensors)
            obs, actions = tensors["obs"], tensors["actions"]
            spec = RolloutSpec(t, b, int(obs.shape[-1]), int(actions.shape[-1]),
                               action_dtype=actions.dtype, float_dtype=obs.dtype,
                               fields=rollout_fields())
        super().__init__(spec, dict(tensors), block)
        self.policy_versions = policy_versions
        """Policy version that produced each column ``[B]`` int64."""

    @classmethod
    def of(cls, rollout: Rollout, policy_versions: Tensor) -> RolloutBatch:
        """A batch over ``rollout``'s tensors (no copy)."""
        return cls(policy_versions, spec=rollout.spec, block=rollout.block, **rollout.tensors())

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

    def validate(self, obs_dim: int | None = None, action_dim: int | None = None) -> None:
        """Raise ``ValueError`` naming the first field whose shape, dtype or device is wrong."""
        _, b = check_rollout(self.tensors(), self.spec.fields, obs_dim, action_dim)
        v = self.policy_versions
        if not isinstance(v, Tensor) or tuple(v.shape) != (b,):
            shape = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
            raise ValueError(f"policy_versions must have shape (B,) = ({b},), got {shape}")
        if v.dtype != torch.int64:
            raise ValueError(f"policy_versions must be int64, got {v.dtype}")
        if v.device != self.obs.device:
            raise ValueError(f"policy_versions is on {v.device} but obs is on {self.obs.device}")

    def to(self, device: torch.device | str, non_blocking: bool = False) -> RolloutBatch:
        """A copy of every tensor on ``device`` (``non_blocking`` for pinned-host sources)."""
        moved = {k: t.to(device, non_blocking=non_blocking) for k, t in self.tensors().items()}
        return RolloutBatch(self.policy_versions.to(device, non_blocking=non_blocking),
                            spec=self.spec, **moved)

    def columns_batch(self, n: int) -> RolloutBatch:
        """The first ``n`` columns as a batch of views (a short final batch)."""
        return RolloutBatch(self.policy_versions[:n], spec=self.spec, **self.columns(slice(0, n)))
