"""The ring's slots and where they live: a slot's states, one preallocated chunk with its place
in the ring, and the placement of the slots' memory (device, pinned or shared host memory).

The protocol that moves slots between their states is :class:`pipeline.transport.ring.RolloutRing`.
"""

from __future__ import annotations

import enum

import torch

from core.schema import Rollout, RolloutSpec


class SlotState(enum.IntEnum):
    """Where a slot is in its cycle."""

    FREE = 0
    WRITING = 1
    READY = 2
    READING = 3


class RingSlot(Rollout):
    """One preallocated chunk (every field of the rollout schema, in one byte block) and its
    place in the ring: state, the policy version and actor that wrote it, its commit order.

    ``written_event`` / ``read_event`` order the producer's and consumer's CUDA streams (None on
    the CPU).
    """

    def __init__(self, index: int, spec: RolloutSpec, device: torch.device, pin: bool, share: bool):
        chunk = spec.allocate(device, pin=pin, share=share)
        super().__init__(spec, chunk.tensors(), chunk.block)
        self.index = index
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
