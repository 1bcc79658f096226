"""What the policy outputs: a small, serializable description of an action space."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KINDS = ("discrete", "multi_discrete", "continuous")


@dataclass(frozen=True)
class ActionSpec:
    """An action space the :class:`learner.ActorCritic` can produce actions for.

    Actions are always ``[B, A]`` tensors: int64 indices for the discrete kinds (``A == 1`` for
    ``"discrete"``, ``A == len(nvec)`` for ``"multi_discrete"``), float for ``"continuous"``.
    """

    kind: str
    """``"discrete"``, ``"multi_discrete"`` or ``"continuous"``."""
    nvec: tuple[int, ...] = ()
    """Number of choices of each component (discrete kinds only)."""
    low: tuple[float, ...] = ()
    """Lower bound of each component (continuous only; the sampled action is not clipped, the
    environment clips it)."""
    high: tuple[float, ...] = ()
    """Upper bound of each component (continuous only)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"ActionSpec.kind must be one of {KINDS}, got {self.kind!r}")
        object.__setattr__(self, "nvec", tuple(int(n) for n in self.nvec))
        object.__setattr__(self, "low", tuple(float(v) for v in self.low))
        object.__setattr__(self, "high", tuple(float(v) for v in self.high))
        if self.kind == "continuous":
            if not self.low or len(self.low) != len(self.high):
                raise ValueError(
                    "continuous ActionSpec needs low and high of one equal, non-zero length, "
                    f"got low={self.low}, high={self.high}"
                )
            if any(not (math.isfinite(lo) and math.isfinite(hi) and lo < hi)
                   for lo, hi in zip(self.low, self.high, strict=True)):
                raise ValueError(f"continuous ActionSpec needs finite low < high, got {self.low}, {self.high}")
            if self.nvec:
                raise ValueError(f"continuous ActionSpec takes no nvec, got {self.nvec}")
        else:
            if not self.nvec or any(n < 1 for n in self.nvec):
                raise ValueError(f"{self.kind} ActionSpec needs nvec of positive ints, got {self.nvec}")
            if self.kind == "discrete" and len(self.nvec) != 1:
                raise ValueError(f"discrete ActionSpec needs exactly one nvec entry, got {self.nvec}")
            if self.low or self.high:
                raise ValueError(f"{self.kind} ActionSpec takes no low/high bounds")

    @property
    def dim(self) -> int:
        """Number of action components A (the last dimension of an action tensor)."""
        return len(self.low) if self.kind == "continuous" else len(self.nvec)

    @property
    def is_discrete(self) -> bool:
        """True for the kinds whose actions are int64 indices."""
        return self.kind != "continuous"

    @property
    def num_logits(self) -> int:
        """Outputs of the policy head: sum of nvec (discrete kinds) or A means (continuous)."""
        return sum(self.nvec) if self.is_discrete else self.dim

    @classmethod
    def for_sim(cls, sim_config: Any) -> ActionSpec:
        """The spec of one fighter's action in the batched simulator with ``sim_config``
        (discrete: rudder 3, throttle 3, fire 2; continuous: rudder [−1, 1], throttle [0, 1],
        fire [0, 1], fire when > 0.5)."""
        mode = getattr(sim_config, "action_mode", None)
        if mode == "discrete":
            return cls("multi_discrete", nvec=(3, 3, 2))
        if mode == "continuous":
            return cls("continuous", low=(-1.0, 0.0, 0.0), high=(1.0, 1.0, 1.0))
        raise ValueError(f"sim_config.action_mode must be 'discrete' or 'continuous', got {mode!r}")

    @staticmethod
    def sim_mirror(spec: ActionSpec) -> dict[str, list[Any]]:
        """How the sim's policy head maps under the arena's mirror image (the rudder reverses;
        throttle and fire keep): ``perm`` (output ``i`` of the mirrored head is output
        ``perm[i]`` of the head) and ``sign`` (then multiplied by ``sign[i]``), for
        :class:`learner.network.ActorCritic`'s ``mirror``. Discrete: rudder choices {−1, 0, +1}
        in reverse order; continuous: the rudder mean negated."""
        if spec.is_discrete:
            if tuple(spec.nvec) != (3, 3, 2):
                raise ValueError(f"not the sim's discrete action spec: nvec {spec.nvec}")
            return {"perm": [2, 1, 0, 3, 4, 5, 6, 7], "sign": [1.0] * 8}
        if spec.dim != 3:
            raise ValueError(f"not the sim's continuous action spec: {spec.dim} components")
        return {"perm": [0, 1, 2], "sign": [-1.0, 1.0, 1.0]}

    @classmethod
    def from_gym(cls, space: Any) -> ActionSpec:
        """The spec of a Gymnasium ``Discrete``, ``MultiDiscrete`` or 1-D ``Box`` space."""
        from gymnasium import spaces

        if isinstance(space, spaces.Discrete):
            if int(space.start) != 0:
                raise ValueError(f"Discrete spaces must start at 0, got start={space.start}")
            return cls("discrete", nvec=(int(space.n),))
        if isinstance(space, spaces.MultiDiscrete):
            if space.nvec.ndim != 1:
                raise ValueError(f"MultiDiscrete spaces must be 1-D, got nvec shape {space.nvec.shape}")
            return cls("multi_discrete", nvec=tuple(int(n) for n in space.nvec))
        if isinstance(space, spaces.Box):
            if len(space.shape) != 1:
                raise ValueError(f"Box action spaces must be 1-D, got shape {space.shape}")
            return cls("continuous", low=tuple(space.low.tolist()), high=tuple(space.high.tolist()))
        raise ValueError(f"unsupported action space {space!r} (Discrete, MultiDiscrete, 1-D Box)")

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for checkpoints."""
        return {"kind": self.kind, "nvec": list(self.nvec), "low": list(self.low), "high": list(self.high)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ActionSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(data["kind"], tuple(data.get("nvec", ())), tuple(data.get("low", ())),
                   tuple(data.get("high", ())))
