"""The PPO learner's configuration: one frozen, validated dataclass, documented field by field."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.bounds import Bounds, check_bounds, count, positive
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
    """Discount factor (the launcher's air-combat sim: 0.993 when left out,
    ``pipeline.config.resolution.SIM_GAMMA``)."""
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
    entropy_weights: tuple[float, ...] = ()
    """Each action component's share of the entropy bonus, one per component (a discrete
    head, or a continuous dimension); empty: 1 for every one. ``[1, 1, 0]`` for the sim keeps
    rudder and throttle exploring and leaves the fire decision to the returns alone (the
    bonus would otherwise pull a rare ``fire`` back towards one half). The ``entropy``
    statistic is the weighted sum."""
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
    mirror: bool = False
    """A policy and value equivariant under the task's mirror image (the air-combat sim's
    arena reflected, left and right exchanged: :class:`learner.network.ActorCritic`'s
    ``mirror``), so each sample teaches both sides of a fight; the env must say what its
    mirror image is (the sim does; a Gymnasium env is refused)."""
    teacher: str = ""
    """Kickstarting (Schmitt et al., 2018, "Kickstarting Deep Reinforcement Learning"): an agent
    whose actions the policy is also taught on its own samples, early in the run. The learner
    takes the teacher as a function from raw observations to actions (``PPOLearner``'s
    ``teacher``); the launcher builds it from this spec (the air-combat sim's agents: a scripted
    name such as ``crank``, ``tactic:NAME``, ``ace``, a checkpoint). Empty: none."""
    teacher_coef: float = 0.0
    """Weight of the teacher's term at the start: ``teacher_coef`` times the mean negative
    log-probability the policy gives the teacher's action, added to the loss. Falls linearly to
    ``teacher_floor`` at ``teacher_until``; 0 turns kickstarting off."""
    teacher_until: float = 0.25
    """Fraction of ``total_updates`` after which the teacher's weight is ``teacher_floor``; with
    the floor at 0 (the default) the teacher is no longer asked: from then on the policy learns
    from the returns alone and may leave the teacher's habits behind."""
    teacher_floor: float = 0.0
    """The weight the teacher's term keeps after ``teacher_until`` (at most ``teacher_coef``):
    0 stops the teacher there; above 0 it is asked to the end of the run at that weight, a
    light pull towards its flying that the returns can outweigh."""
    teacher_weights: tuple[float, ...] = ()
    """Each action component's share of the teacher's term, one per component; empty: 1 for
    every one. ``[1, 1, 0]`` for the sim teaches the teacher's flying (rudder, throttle) and
    leaves when to fire to the returns alone, so a teacher's shooting habits (``ace`` fires
    most of its missiles from outside the reach a turning enemy cannot escape) are not
    copied with its flying."""
    teacher_off_tti_s: float = 0.0
    """The air-combat sim only: where a live enemy missile closes on the learner with a time to
    impact under this (seconds), the teacher's term weighs 0 at that sample and the policy learns
    its defence from the returns alone; 0: the term counts everywhere. A teacher that
    attacks well may defend badly (``ace3``, asked deterministically as a teacher is, loses
    17 % of its fights to ``random``, which fires six missiles from afar)."""
    teacher_defence_weight: float = 0.0
    """With ``teacher_off_tti_s``: the teacher's weight at those samples (0, the default, leaves
    the teacher out of the defence; 0.25 keeps a quarter of its pull there, so the returns
    correct its defence rather than replace it). At most 1."""
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
        for name in ("hidden_sizes", "policy_bias", "entropy_weights", "teacher_weights"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)):
                raise ValueError(f"{name} must be a list of numbers, got {value!r}")
        if not 1 <= len(self.hidden_sizes) <= MAX_HIDDEN_LAYERS:
            raise ValueError(f"hidden_sizes must be a list of 1 to {MAX_HIDDEN_LAYERS} layer widths, "
                             f"got {len(self.hidden_sizes)}")
        if len(self.policy_bias) > MAX_POLICY_BIAS:
            raise ValueError(f"policy_bias must hold at most {MAX_POLICY_BIAS} numbers (one per "
                             f"output of the policy head), got {len(self.policy_bias)}")
        for name in ("entropy_weights", "teacher_weights"):
            if len(getattr(self, name)) > MAX_POLICY_BIAS:
                raise ValueError(f"{name} must hold at most {MAX_POLICY_BIAS} numbers (one per "
                                 f"action component), got {len(getattr(self, name))}")
        check_bounds(self, PPO_BOUNDS)
        object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
        object.__setattr__(self, "policy_bias", tuple(float(b) for b in self.policy_bias))
        object.__setattr__(self, "entropy_weights", tuple(float(w) for w in self.entropy_weights))
        object.__setattr__(self, "teacher_weights", tuple(float(w) for w in self.teacher_weights))
        if self.teacher_weights and not any(self.teacher_weights):
            raise ValueError(f"teacher_weights are all 0: the teacher would teach nothing "
                             f"(got {list(self.teacher_weights)}; [] means 1 for each component)")
        if not isinstance(self.teacher, str):
            raise ValueError(f"teacher must be an agent spec string, got {self.teacher!r}")
        if self.teacher_coef > 0 and not self.teacher.strip():
            raise ValueError(f"teacher_coef is {self.teacher_coef} but no teacher is named (teacher = \"\")")
        if self.teacher_weights and not self.teacher.strip():
            raise ValueError(f"teacher_weights {list(self.teacher_weights)} are given but no teacher is named "
                             "(teacher = \"\")")
        if self.teacher.strip() and self.teacher_coef == 0:
            raise ValueError(f"teacher {self.teacher!r} is named but teacher_coef is 0 (it would never be asked)")
        if self.teacher_off_tti_s and not self.teacher.strip():
            raise ValueError(f"teacher_off_tti_s {self.teacher_off_tti_s} is given but no teacher is named "
                             "(teacher = \"\")")
        if self.teacher_defence_weight and not self.teacher_off_tti_s:
            raise ValueError(f"teacher_defence_weight {self.teacher_defence_weight} is given but "
                             "teacher_off_tti_s is 0 (no sample is in the defence)")
        if self.teacher_floor > self.teacher_coef:
            raise ValueError(f"teacher_floor {self.teacher_floor} is above teacher_coef {self.teacher_coef}: "
                             "the weight falls from teacher_coef to teacher_floor")
        if self.activation not in ("tanh", "relu"):
            raise ValueError(f"activation must be 'tanh' or 'relu', got {self.activation!r}")
        for f in dataclasses.fields(self):
            if f.type == "bool" and not isinstance(getattr(self, f.name), bool):
                raise ValueError(f"{f.name} must be true or false, got {getattr(self, f.name)!r}")

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


MAX_HIDDEN_LAYERS = 16
"""The most hidden layers ``hidden_sizes`` may list."""
MAX_POLICY_BIAS = 1024
"""The most initial biases ``policy_bias`` may hold (the sim's head has 8, or 3 continuous)."""



PPO_BOUNDS: dict[str, Bounds] = {
    "hidden_sizes": count(1, 65_536),
    "learning_rate": positive(10.0),
    "total_updates": count(1, 10**15),
    "gamma": Bounds(0.0, 1.0),
    "gae_lambda": Bounds(0.0, 1.0),
    "num_minibatches": count(1, 2**24),
    "update_epochs": count(1, 1000),
    "clip_coef": positive(100.0),
    "value_clip_coef": positive(1e6),
    "entropy_coef": Bounds(0.0, 1000.0),
    "entropy_weights": Bounds(0.0, 1000.0),
    "teacher_weights": Bounds(0.0, 1000.0),
    "value_coef": Bounds(0.0, 1000.0),
    "max_grad_norm": positive(1e6),
    "reward_scale": positive(1e6),
    "target_kl": positive(1000.0),
    "vtrace_rho_clip": positive(1e6),
    "vtrace_c_clip": positive(1e6),
    "obs_norm_clip": positive(1e6),
    "adam_eps": positive(1.0),
    "seed": count(0, 2**64 - 1),
    "policy_bias": Bounds(-100.0, 100.0),
    "teacher_coef": Bounds(0.0, 1000.0),
    "teacher_until": positive(1.0),
    "teacher_floor": Bounds(0.0, 1000.0),
    "teacher_off_tti_s": Bounds(0.0, 1e6),
    "teacher_defence_weight": Bounds(0.0, 1.0),
}
"""The range of each number of :class:`PPOConfig` (a list's bound holds for each item; a
``target_kl`` of ``None`` is "never"). ``update_epochs`` is a count of passes one update makes
over its batch: a thousand is already far past any recipe, and the bound keeps an update from
running for ever."""
