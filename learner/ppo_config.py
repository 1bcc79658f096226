"""The PPO learner's configuration: one frozen, validated dataclass, documented field by field."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.coerce import coerce


@dataclass(frozen=True)
class PPOConfig:
    """Hyper-parameters and switches of :class:`learner.PPOLearner`.

    Defaults follow CleanRL's PPO for Atari/classic control where it has one. A bad value raises
    ``ValueError`` naming the field, at construction time.
    """

    hidden_sizes: tuple[int, ...] = (256, 256)
    """Widths of the hidden layers of the actor and of the critic (two separate MLPs)."""
    activation: str = "tanh"
    """Hidden activation: ``"tanh"`` or ``"relu"``."""
    learning_rate: float = 3e-4
    """Adam learning rate at the start of training."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over ``total_updates``."""
    total_updates: int = 1000
    """Number of :meth:`PPOLearner.update` calls the schedule spans (used when ``anneal_lr``)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE λ (also the trace factor of V-trace)."""
    num_minibatches: int = 4
    """Minibatches per epoch; the flattened batch size ``T · B`` must be divisible by it."""
    update_epochs: int = 4
    """Passes over the batch per update."""
    clip_coef: float = 0.2
    """PPO ratio clipping ε."""
    clip_value_loss: bool = True
    """Clip the value prediction around the behaviour value (PPO2 style)."""
    value_clip_coef: float = 0.2
    """Clipping range of the value prediction when ``clip_value_loss``."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus."""
    value_coef: float = 0.5
    """Weight of the value loss."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip (after the all-reduce under data parallel)."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this before advantages and value targets (the critic learns
    scaled returns): e.g. 0.1 for an env whose rewards reach −16 a step, like Pendulum-v1, so
    the value loss does not swamp the policy's gradient under the norm clip."""
    normalize_advantages: bool = True
    """Normalize advantages per minibatch to zero mean, unit std."""
    target_kl: float | None = None
    """Stop the epochs early when the mean approximate KL of an epoch exceeds this (None: never)."""
    use_vtrace: bool = False
    """Compute value targets and advantages with V-trace against the current policy, which
    corrects data produced by an older policy (the PPO ratio already uses the behaviour
    log-probs either way)."""
    vtrace_rho_clip: float = 1.0
    """V-trace ρ̄: clip of the importance weight in the value target and the advantage."""
    vtrace_c_clip: float = 1.0
    """V-trace c̄: clip of the trace-cutting importance weight."""
    normalize_obs: bool = True
    """Keep running observation statistics and feed the network normalized observations."""
    obs_norm_clip: float = 10.0
    """Normalized observations are clipped to ± this."""
    update_obs_norm: bool = True
    """Update the observation statistics from each batch at the start of :meth:`update`."""
    bf16: bool = False
    """Run the forward passes of the update under bf16 autocast (CUDA only; ignored on CPU)."""
    fused_adam: bool = True
    """Use the fused Adam kernel where the device supports it (else the foreach one)."""
    compile: bool = False
    """``torch.compile`` the minibatch loss function."""
    adam_eps: float = 1e-5
    """Adam ε."""
    seed: int = 0
    """Seed of the network initialization and of the minibatch shuffles."""
    bootstrap_truncated: bool = True
    """Where an episode was truncated (a time limit), bootstrap from the value of its final
    observation, as a time limit the policy cannot see requires. Off: a truncated episode ends
    there like a terminated one, which is right where the observation carries the time left,
    so the limit is part of the task and its outcome (a draw at the limit) must reach the
    values (Pardo et al., 2018, "Time Limits in Reinforcement Learning")."""
    policy_bias: tuple[float, ...] = ()
    """Initial biases of the policy head, one per logit (discrete) or mean (continuous); empty:
    zeros. A prior for a fresh network: a strongly negative bias on an irreversible action
    (the sim's ``fire``) makes the first policies take it rarely and at every point of an
    episode, instead of at once in half of all steps."""

    def __post_init__(self) -> None:
        if not isinstance(self.hidden_sizes, (tuple, list)) or not self.hidden_sizes or not all(
            isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in self.hidden_sizes
        ):
            raise ValueError(
                f"hidden_sizes must be a non-empty tuple of positive ints, got {self.hidden_sizes!r}"
            )
        if isinstance(self.hidden_sizes, list):
            object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        if not isinstance(self.policy_bias, (tuple, list)):
            raise ValueError(f"policy_bias must be a list of numbers, got {self.policy_bias!r}")
        for i, b in enumerate(self.policy_bias):
            _check_number(f"policy_bias[{i}]", b, low=-math.inf)
        object.__setattr__(self, "policy_bias", tuple(float(b) for b in self.policy_bias))
        if self.activation not in ("tanh", "relu"):
            raise ValueError(f"activation must be 'tanh' or 'relu', got {self.activation!r}")
        for name in ("learning_rate", "clip_coef", "value_clip_coef", "max_grad_norm", "adam_eps",
                     "vtrace_rho_clip", "vtrace_c_clip", "obs_norm_clip", "reward_scale"):
            _check_number(name, getattr(self, name), low=0.0, low_inclusive=False)
        for name in ("gamma", "gae_lambda"):
            value = getattr(self, name)
            _check_number(name, value, low=0.0)
            if value > 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        for name in ("entropy_coef", "value_coef"):
            _check_number(name, getattr(self, name), low=0.0)
        for name in ("total_updates", "num_minibatches", "update_epochs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.target_kl is not None:
            _check_number("target_kl", self.target_kl, low=0.0, low_inclusive=False)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def replace(self, **changes: Any) -> PPOConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for TOML, JSON and checkpoints)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> PPOConfig:
        """Build from a plain dict (``core.coerce.coerce``: every value checked against its
        field's type); unknown keys raise ``ValueError`` naming them."""
        return coerce(cls, data, unknown="unknown PPO config field(s): {names}")


def _check_number(name: str, value: Any, low: float, low_inclusive: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < low or (not low_inclusive and value == low):
        bound = ">=" if low_inclusive else ">"
        raise ValueError(f"{name} must be {bound} {low}, got {value!r}")
