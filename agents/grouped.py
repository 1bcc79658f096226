"""One opponent per group of environments: how a league plays many opponents in one batch.

A :class:`GroupedOpponent` flies the other side of ``N`` environments split into ``G`` equal,
contiguous groups. Each group holds the same set of candidate agents, each sized to the group
(scripted anchors, and a policy whose weights a league copies in); one of them is the group's
current opponent. All groups are stepped by the same batched sim step and each group's opponent
acts with one batched call: the Python loop is over groups, never over environments.

Switching a group's opponent allocates nothing: it changes which candidate acts (and, for a
policy, copies weights into its preallocated parameters). With ``select_on_device`` every
candidate acts on every group and a device-side choice picks the actions, so a captured CUDA
graph replays the same kernels whichever opponents are chosen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from agents.base import BaseAgent


class GroupedOpponent(BaseAgent):
    """``G`` groups of environments, each facing its current candidate.

    Args:
        candidates: one mapping per group, candidate name → agent (every group the same names,
            every agent of a group the same ``num_envs``, the group's size).
        select_on_device: act with every candidate and select on the device (graph-safe)
            instead of calling only the current one.
    """

    def __init__(self, candidates: Sequence[Mapping[str, BaseAgent]], select_on_device: bool = False):
        if not candidates:
            raise ValueError("a grouped opponent needs at least one group")
        names = list(candidates[0])
        if not names:
            raise ValueError("a grouped opponent needs at least one candidate per group")
        sizes: list[int] = []
        for g, group in enumerate(candidates):
            if list(group) != names:
                raise ValueError(f"group {g} has candidates {list(group)}, group 0 has {names}")
            counts = {a.num_envs for a in group.values()}
            if len(counts) != 1:
                raise ValueError(f"group {g}: candidates sized for different numbers of envs {sorted(counts)}")
            sizes.append(counts.pop())
        first = candidates[0][names[0]]
        modes = {a.action_mode for group in candidates for a in group.values()}
        if modes != {first.action_mode}:
            raise ValueError(f"candidates act in different action modes: {sorted(modes)}")
        super().__init__(sum(sizes), first.device, first.action_mode)
        self.names = names
        self.candidates = [dict(group) for group in candidates]
        self.bounds: list[tuple[int, int]] = []
        start = 0
        for size in sizes:
            self.bounds.append((start, start + size))
            start += size
        self.current = [names[0]] * len(candidates)
        """Each group's current candidate."""
        self.select_on_device = select_on_device
        dtype = torch.int64 if self.action_mode == "discrete" else torch.float32
        self._out = torch.zeros(self.num_envs, 3, dtype=dtype, device=self.device)
        self._choice = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._stack = torch.zeros(len(names), self.num_envs, 3, dtype=dtype, device=self.device)

    def prepare(self) -> None:
        """Prepare every candidate (see ``BaseAgent.prepare``)."""
        for group in self.candidates:
            for agent in group.values():
                agent.prepare()

    @property
    def num_groups(self) -> int:
        return len(self.bounds)

    def group_mask(self, group: int) -> torch.Tensor:
        """Bool ``[N]``: the environments of ``group``."""
        a, b = self.bounds[group]
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        mask[a:b] = True
        return mask

    def assign(self, group: int, name: str) -> None:
        """Make candidate ``name`` the opponent of ``group`` from its next step; its memory of
        the group's environments is cleared (the caller restarts their episodes)."""
        if name not in self.names:
            raise ValueError(f"unknown candidate {name!r}: expected one of {self.names}")
        self.current[group] = name
        agent = self.candidates[group][name]
        agent.reset(torch.ones(agent.num_envs, dtype=torch.bool, device=self.device))
        a, b = self.bounds[group]
        self._choice[a:b] = self.names.index(name)

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions ``[N, 3]``: each group's slice from its current candidate."""
        self._check_obs(obs)
        if self.select_on_device:
            for g, (a, b) in enumerate(self.bounds):
                for k, name in enumerate(self.names):
                    self._stack[k, a:b].copy_(self.candidates[g][name].act(obs[a:b]))
            self._out.copy_(self._stack.gather(0, self._choice.view(1, -1, 1).expand(1, -1, 3))[0])
            return self._out
        return self._act_current(obs)

    @torch.compiler.disable
    def _act_current(self, obs: torch.Tensor) -> torch.Tensor:
        # Which candidate acts is host state that changes between chunks: a compiled decision
        # step calls this as it is (one graph break) instead of recompiling for each draw.
        for g, (a, b) in enumerate(self.bounds):
            self._out[a:b].copy_(self.candidates[g][self.current[g]].act(obs[a:b]))
        return self._out

    def reset(self, env_mask: torch.Tensor) -> None:
        """Clear the memory of the masked environments in the candidates that act on them."""
        self._check_mask(env_mask)
        if self.select_on_device:
            for g, (a, b) in enumerate(self.bounds):
                for name in self.names:
                    self.candidates[g][name].reset(env_mask[a:b])
        else:
            self._reset_current(env_mask)

    @torch.compiler.disable
    def _reset_current(self, env_mask: torch.Tensor) -> None:
        for g, (a, b) in enumerate(self.bounds):
            self.candidates[g][self.current[g]].reset(env_mask[a:b])

    def to(self, device: torch.device | str) -> GroupedOpponent:
        """Move every candidate and the buffers to ``device``."""
        for group in self.candidates:
            for agent in group.values():
                agent.to(device)
        super().to(device)
        self._out = self._out.to(self.device)
        self._choice = self._choice.to(self.device)
        self._stack = self._stack.to(self.device)
        return self

    def generators(self) -> list[torch.Generator]:
        """Every candidate's generators (a graph-captured step may draw from any of them)."""
        return [g for group in self.candidates for agent in group.values() for g in agent.generators()]
