"""Ring slots: the preallocated storage of one rollout chunk, its states and placement.

A slot holds T × B observations, actions, behaviour log-probs and values, rewards, terminated
and truncated flags, bootstrap values and next values, stamped with the policy version and the
actor that wrote it. ``pipeline.ring`` moves slots through their states; this module owns what a
slot is and where its memory lives.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch

MAGIC_FLOAT = -7.25e37
"""Debug fill of float fields: far outside anything a policy or the sim produces."""
MAGIC_INT = -0x5A5A5A5A5A5A5A5A
"""Debug fill of int64 fields (actions)."""
MAGIC_BYTE = 0xA5
"""Debug fill of the byte storage behind the bool fields (neither 0 nor 1)."""


class SlotState(enum.IntEnum):
    """Where a slot is in its cycle."""

    FREE = 0
    WRITING = 1
    READY = 2
    READING = 3


@dataclass(frozen=True)
class SlotSpec:
    """Shape of one rollout chunk."""

    rollout_len: int
    """T: decision steps per chunk."""
    num_envs: int
    """B: environments (learning fighters) per chunk."""
    obs_dim: int
    """D: observation size."""
    action_dim: int
    """A: action components per decision (3 for the sim)."""
    action_dtype: torch.dtype = torch.int64
    """int64 for discrete kinds, a float type for continuous actions."""
    obs_dtype: torch.dtype = torch.float32
    """Observation / float field type."""

    def __post_init__(self) -> None:
        for name in ("rollout_len", "num_envs", "obs_dim", "action_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SlotSpec.{name} must be an integer >= 1, got {value!r}")

    @property
    def samples(self) -> int:
        """Agent-steps in one chunk (T × B)."""
        return self.rollout_len * self.num_envs


class RingSlot:
    """One preallocated chunk: T × B observations, actions, log-probs, values, rewards, flags.

    ``terminated`` and ``truncated`` are bool views of byte storage so the debug fill can put a
    value in them that is neither true nor false. ``written_event`` / ``read_event`` order the
    producer's and consumer's CUDA streams (None on CPU).
    """

    def __init__(self, index: int, spec: SlotSpec, device: torch.device, pin: bool, share: bool):
        T, B = spec.rollout_len, spec.num_envs

        def alloc(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
            t = torch.zeros(shape, dtype=dtype, device=device)
            if pin:
                t = t.pin_memory()
            elif share:
                t.share_memory_()
            return t

        self.index = index
        self.spec = spec
        self.obs = alloc((T, B, spec.obs_dim), spec.obs_dtype)
        self.actions = alloc((T, B, spec.action_dim), spec.action_dtype)
        self.log_probs = alloc((T, B), spec.obs_dtype)
        self.values = alloc((T, B), spec.obs_dtype)
        self.rewards = alloc((T, B), spec.obs_dtype)
        self.bootstrap_values = alloc((T, B), spec.obs_dtype)
        self.next_values = alloc((B,), spec.obs_dtype)
        self._terminated_bytes = alloc((T, B), torch.uint8)
        self._truncated_bytes = alloc((T, B), torch.uint8)
        self.terminated = self._terminated_bytes.view(torch.bool)
        self.truncated = self._truncated_bytes.view(torch.bool)
        self.state = SlotState.FREE
        self.policy_version = -1
        self.actor_id = -1
        self.sequence = -1
        """Commit order over the whole ring (the learner reads oldest first)."""
        self.uses = 0
        cuda = device.type == "cuda" or pin
        # Blocking: the sync mode waits on it with synchronize(), which then sleeps, not spins.
        self.written_event = torch.cuda.Event(blocking=True) if cuda else None
        self.read_event = torch.cuda.Event() if cuda else None

    def float_fields(self) -> dict[str, torch.Tensor]:
        """Float tensors by name."""
        fields = {
            "obs": self.obs,
            "log_probs": self.log_probs,
            "values": self.values,
            "rewards": self.rewards,
            "bootstrap_values": self.bootstrap_values,
            "next_values": self.next_values,
        }
        if self.actions.is_floating_point():
            fields["actions"] = self.actions
        return fields

    def storage(self) -> dict[str, torch.Tensor]:
        """Every tensor of the slot by name (bool fields as their byte storage)."""
        return {
            **self.float_fields(),
            "actions": self.actions,
            "terminated_bytes": self._terminated_bytes,
            "truncated_bytes": self._truncated_bytes,
        }

    def fill_magic(self) -> None:
        """Overwrite every field with the debug magic value."""
        for t in self.float_fields().values():
            t.fill_(MAGIC_FLOAT)
        if not self.actions.is_floating_point():
            self.actions.fill_(MAGIC_INT)
        self._terminated_bytes.fill_(MAGIC_BYTE)
        self._truncated_bytes.fill_(MAGIC_BYTE)

    def unwritten_fields(self) -> list[str]:
        """Names of fields still holding the magic value anywhere (a host sync: debug only)."""
        bad = []
        for name, t in self.float_fields().items():
            if bool((t == torch.tensor(MAGIC_FLOAT, dtype=t.dtype)).any()):
                bad.append(name)
        if not self.actions.is_floating_point() and bool((self.actions == MAGIC_INT).any()):
            bad.append("actions")
        if bool((self._terminated_bytes == MAGIC_BYTE).any()):
            bad.append("terminated")
        if bool((self._truncated_bytes == MAGIC_BYTE).any()):
            bad.append("truncated")
        return bad

    def nbytes(self) -> int:
        """Bytes of tensor storage in this slot."""
        tensors = [*self.float_fields().values(), self._terminated_bytes, self._truncated_bytes]
        if not self.actions.is_floating_point():
            tensors.append(self.actions)
        return sum(t.numel() * t.element_size() for t in tensors)


def choose_placement(requested: str, actor_device: torch.device, learner_device: torch.device) -> str:
    """Resolve ``auto`` and check an explicit placement is possible on these devices.

    device memory when actors and learner share a GPU (a PCIe round trip would only cost time);
    pinned host memory when rollouts cross devices; plain shared CPU memory on CPU-only hosts.
    """
    actor_device, learner_device = torch.device(actor_device), torch.device(learner_device)
    if requested == "auto":
        if actor_device.type == "cuda" and actor_device == learner_device:
            return "device"
        if "cuda" in (actor_device.type, learner_device.type):
            return "pinned"
        return "shared"
    if requested == "device":
        if actor_device != learner_device and actor_device.type == "cuda":
            raise ValueError(
                f"ring placement 'device' needs actors and learner on one device, "
                f"got actors on {actor_device} and learner on {learner_device}"
            )
        return "device"
    if requested == "pinned":
        if not torch.cuda.is_available():
            raise ValueError("ring placement 'pinned' needs CUDA (pinned host memory), none found")
        return "pinned"
    if requested == "shared":
        if actor_device.type == "cuda" and learner_device.type == "cuda":
            raise ValueError("ring placement 'shared' is host memory; use 'device' or 'pinned' on CUDA")
        return "shared"
    raise ValueError(f"ring placement must be auto, device, pinned or shared, got {requested!r}")
