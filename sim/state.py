"""The batched simulator's state: preallocated tensors, updated in place.

Index conventions: side (0 red, 1 blue) first, then missile slot, then environment *last*, so
every elementwise kernel runs over contiguous memory along the environments (SIMD lanes on a CPU,
coalesced loads on a GPU). Vectors are stored as separate x and y tensors. The missiles in
``m_*[s]`` belong to side ``s`` and target fighter ``1 − s``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from sim.config import SimConfig


@dataclass
class SimState:
    """All per-environment state of :class:`sim.BatchedSim` (see sim/RULES.md)."""

    f_px: torch.Tensor  # [2, N] fighter position x, m
    f_py: torch.Tensor
    f_vx: torch.Tensor  # [2, N] fighter velocity x, m/s
    f_vy: torch.Tensor
    f_throttle: torch.Tensor  # [2, N] in [0, 1]
    f_rudder: torch.Tensor  # [2, N] in [-1, 1]
    f_alive: torch.Tensor  # [2, N] bool
    f_ammo: torch.Tensor  # [2, N] int32 missiles left
    f_since_launch: torch.Tensor  # [2, N] int32 physics steps since the last launch
    f_fire_req: torch.Tensor  # [2, N] bool pending fire request of this decision
    m_active: torch.Tensor  # [2, M, N] bool
    m_px: torch.Tensor  # [2, M, N]
    m_py: torch.Tensor
    m_vx: torch.Tensor
    m_vy: torch.Tensor
    m_rudder: torch.Tensor  # [2, M, N]
    m_steps: torch.Tensor  # [2, M, N] int32 physics steps flown
    physics_steps: torch.Tensor  # [N] int64 physics steps of the episode so far
    decision_steps: torch.Tensor  # [N] int64 decision steps of the episode so far
    episode_index: torch.Tensor  # [N] int64 episodes started by this environment, minus one

    @classmethod
    def allocate(cls, num_envs: int, config: SimConfig, device: torch.device) -> SimState:
        """Zeroed state for ``num_envs`` environments (call ``reset`` before stepping)."""
        n, m = num_envs, config.missiles_per_fighter
        dtype = getattr(torch, config.dtype)

        def fl(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        def it(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.int64, device=device)

        def i32(*shape: int) -> torch.Tensor:
            # Per-slot counters are int32: half the memory traffic of int64 in every step.
            return torch.zeros(shape, dtype=torch.int32, device=device)

        def bo(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.bool, device=device)

        return cls(
            f_px=fl(2, n), f_py=fl(2, n), f_vx=fl(2, n), f_vy=fl(2, n),
            f_throttle=fl(2, n), f_rudder=fl(2, n), f_alive=bo(2, n), f_ammo=i32(2, n),
            f_since_launch=i32(2, n), f_fire_req=bo(2, n),
            m_active=bo(2, m, n), m_px=fl(2, m, n), m_py=fl(2, m, n), m_vx=fl(2, m, n),
            m_vy=fl(2, m, n), m_rudder=fl(2, m, n), m_steps=i32(2, m, n),
            physics_steps=it(n), decision_steps=it(n), episode_index=it(n),
        )

    def tensors(self) -> dict[str, torch.Tensor]:
        """Name → tensor, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def clone(self) -> SimState:
        """A deep copy (for snapshots and tests)."""
        return SimState(**{k: v.clone() for k, v in self.tensors().items()})

    def select(self, env_idx: torch.Tensor) -> SimState:
        """A copy holding only the environments ``env_idx`` (environment is the last dim)."""
        return SimState(**{k: v[..., env_idx] for k, v in self.tensors().items()})

    def copy_(self, other: SimState) -> None:
        """Overwrite this state in place with ``other``'s values."""
        for name, tensor in self.tensors().items():
            tensor.copy_(getattr(other, name))
