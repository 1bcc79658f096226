"""A kickstarting teacher's answer, checked at the learner's boundary.

A teacher (``PPOLearner``'s ``teacher``) maps raw observations ``[B, D]`` to actions ``[B, A]``,
or to those actions and a weight ``[B]`` in [0, 1] per sample: how much the teacher's term counts
there (0: not at all, and the policy learns that sample from the returns alone). Its answer is
checked here before any weight moves, with one host synchronization for the actions' and the
weights' ranges together.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from learner.spaces import ActionSpec

Teacher = Callable[[Tensor], "Tensor | tuple[Tensor, Tensor]"]
"""A kickstarting teacher: raw observations ``[B, D]`` to actions ``[B, A]`` (int64 indices
for the discrete kinds, floats for continuous), like the policy's own; or to those actions and
a weight ``[B]`` in [0, 1] per sample, how much the teacher's term counts there (0: not at all,
and the policy learns that sample from the returns alone)."""


def checked_answer(answer: object, want: tuple[int, ...], action_spec: ActionSpec,
                   nvec: Tensor) -> tuple[Tensor, Tensor | None]:
    """The teacher's ``answer`` as ``(actions, weights or None)``, refused with a ``ValueError``
    naming what is wrong: actions not of shape ``want`` (``[B, A]``), of the wrong dtype or
    outside the action space (``nvec``: the discrete kinds' sizes); weights not a float tensor
    of shape ``[B]`` or outside [0, 1]."""
    actions, weight = answer if isinstance(answer, tuple) and len(answer) == 2 else (answer, None)
    if not isinstance(actions, Tensor) or tuple(actions.shape) != want:
        got = tuple(actions.shape) if isinstance(actions, Tensor) else type(actions).__name__
        raise ValueError(f"the teacher must return actions of shape {want}, got {got}")
    if action_spec.is_discrete:
        if actions.is_floating_point() or actions.dtype == torch.bool:
            raise ValueError(f"the teacher must return int64 action indices for a {action_spec.kind} "
                             f"policy, got {actions.dtype}")
        bad = (actions < 0) | (actions >= nvec.to(actions.device))
    else:
        bad = ~actions.isfinite()
    flags = [bad.any()]
    if weight is not None:
        if not isinstance(weight, Tensor) or tuple(weight.shape) != want[:1] or not weight.is_floating_point():
            shown = f"{tuple(weight.shape)} {weight.dtype}" if isinstance(weight, Tensor) else type(weight).__name__
            raise ValueError(f"the teacher's weights must be a float tensor of shape {want[:1]}, got {shown}")
        flags.append(((weight < 0) | (weight > 1) | ~weight.isfinite()).any().to(bad.device))
    bad_actions, *bad_weights = torch.stack(flags).tolist()
    if bad_actions:
        raise ValueError("the teacher returned actions outside the action space (indices out of range "
                         "or non-finite values)")
    if any(bad_weights):
        raise ValueError("the teacher's weights must lie in [0, 1]")
    return actions, weight
