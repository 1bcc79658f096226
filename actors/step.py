"""One decision step of an actor: what it produced, where its outputs go (in a slot that fits
the actor's chunks), and the errors that end a chunk.

Both actors (:mod:`actors.sim_actor`, :mod:`actors.gym_actor`) record a step as a
:class:`PolicyStep` of their own kind (the rollout schema's step fields are read from it) and
write it into :class:`StepTargets` of a slot that :func:`check_slot` accepted.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from core.schema import Rollout, RolloutSpec
from sim import StepResult


class ChunkInterrupted(RuntimeError):
    """A chunk was given up between two decision steps because the run is stopping."""


class ContractViolation(RuntimeError):
    """Found at a chunk boundary: a plug-in's output broke its contract (actions out of range,
    a non-finite reward) or the policy's outputs went non-finite. Restarting the actor would
    meet it again, so the run stops."""


def check_slot(slot: Rollout, spec: RolloutSpec, actor_id: int) -> None:
    """Refuse a slot whose chunks are not the ones actor ``actor_id`` writes (``spec``)."""
    if slot.spec != spec:
        raise ValueError(f"slot does not match actor {actor_id}'s chunks: "
                         f"{slot.spec.difference(spec)} (slot vs actor)")


@dataclass
class PolicyStep:
    """What the learning side's policy and its environment produced in one decision step, as
    every actor records it."""

    obs: Tensor
    """The learning side's observation before the step ``[B, D]``."""
    actions: Tensor
    """Its action ``[B, A]``."""
    log_probs: Tensor
    values: Tensor
    rewards: Tensor
    """The reward of the step ``[B]`` (the sim actor's reward plug-in, or the env's)."""
    bootstrap_values: Tensor
    """Value of the final observation where truncated, 0 elsewhere ``[B]``."""


@dataclass
class DecisionStep(PolicyStep):
    """What one decision step of the sim produced. The rollout schema's step fields are copied
    from it (each field's ``source`` names an attribute here), so a new field whose value is
    already here needs no edit of the actor."""

    opponent_actions: Tensor
    """The opponent's action ``[B, A]``."""
    result: StepResult
    """The sim's step result (both sides; ``final_obs``, ``winner``, ``end_reason``, ...)."""


@dataclass
class StepTargets:
    """Where one decision step's outputs go: row ``t`` of a chunk's step fields (a ring slot, a
    staging twin or static graph buffers) and of the chunk's episode bookkeeping."""

    fields: dict[str, Tensor]
    """Row ``t`` of every step field of the rollout schema, by name."""
    done: Tensor
    lengths: Tensor

    def copy_from(self, other: StepTargets) -> None:
        """Copy every tensor from ``other`` (same shapes)."""
        for name, t in self.fields.items():
            t.copy_(other.fields[name])
        self.done.copy_(other.done)
        self.lengths.copy_(other.lengths)
