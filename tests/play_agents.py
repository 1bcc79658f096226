"""Agents for the cockpit's tests, loaded by their import path as a user's plug-in would be."""

from __future__ import annotations

import torch

from agents.base import BaseAgent


class OutOfRangeAgent(BaseAgent):
    """Flies straight for its first decision, then asks for a rudder index that does not exist."""

    calls = 0

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        rudder = 1 if self.calls == 1 else 7
        return torch.tensor([[rudder, 2, 0]] * obs.shape[0], dtype=torch.int64)
