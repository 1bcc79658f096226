"""A neural policy flying one side: wraps the learner's :class:`learner.ActorCritic`.

Any module with the same ``act(obs, deterministic) -> (actions, log_prob, value)`` signature
plugs in. The wrapper adds the batch contract of :class:`agents.BaseAgent`. A network that also
has ``act_only`` (``ActorCritic`` has) is asked for its actions alone: an agent flying a side
(an opponent, a teacher, a seat in the cockpit) needs no value and no log-probability, and
skipping them halves the work of a small network's step (bench/RESULTS.md, "Opponents that
only choose").
"""

from __future__ import annotations

import inspect
from typing import Protocol, cast

import torch

from agents.base import BaseAgent, seeded_generator


class PolicyNetwork(Protocol):
    """What :class:`PolicyAgent` needs from a network (``learner.ActorCritic`` fits)."""

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(actions [B, A], log_prob [B], value [B])`` for ``obs [B, D]``."""
        ...


class _SeededPolicyNetwork(Protocol):
    """A :class:`PolicyNetwork` whose ``act`` also samples from a given generator."""

    def act(self, obs: torch.Tensor, deterministic: bool = False,
            generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As :meth:`PolicyNetwork.act`, drawing random numbers from ``generator``."""
        ...


class PolicyAgent(BaseAgent):
    """Acts with a policy network; stateless across steps (the network is feed-forward).

    Args:
        policy: an ``ActorCritic`` (or any ``torch.nn.Module`` with its ``act`` signature).
        num_envs: batch size N of the observations it will see.
        deterministic: take the most likely action instead of sampling.
        seed: seeds the agent's own generator, used when the network's ``act`` takes a
            ``generator`` (``ActorCritic`` does); otherwise it samples from PyTorch's default.
        obs_dim: the width of the observations it is handed, when wider than the network's
            input: the network reads their first components (a network trained without past
            frames in a sim that stacks them, ``sim.layout.ObsLayout.frames_prefix``). None:
            the network's own width.
    """

    def __init__(self, policy: torch.nn.Module, num_envs: int, deterministic: bool = False,
                 seed: int = 0, obs_dim: int | None = None):
        if not callable(getattr(policy, "act", None)):
            raise ValueError(f"policy must have an act(obs, deterministic) method, got {type(policy).__name__}")
        param = next(iter(policy.parameters()), None) if isinstance(policy, torch.nn.Module) else None
        device = param.device if param is not None else torch.device("cpu")
        spec = getattr(policy, "action_spec", None)
        action_mode = "continuous" if getattr(spec, "kind", "") == "continuous" else "discrete"
        super().__init__(num_envs, device, action_mode)
        self.policy = policy
        self.deterministic = deterministic
        reads: int | None = getattr(policy, "obs_dim", None)
        if obs_dim is not None and reads is not None and obs_dim < reads:
            raise ValueError(f"obs_dim {obs_dim} is narrower than the network's input ({reads})")
        self.obs_dim: int | None = reads if obs_dim is None else obs_dim
        self._reads = reads if obs_dim is not None and obs_dim != reads else None
        """The leading components the network reads, when it reads fewer than it is handed."""
        self.training = bool(getattr(policy, "training", False))
        self.seed = seed
        try:
            self._takes_generator = "generator" in inspect.signature(cast(PolicyNetwork, policy).act).parameters
        except (TypeError, ValueError):
            self._takes_generator = False
        self._generator = seeded_generator(self.device, seed) if self._takes_generator else None
        act_only = getattr(policy, "act_only", None)
        self._act_only = act_only if callable(act_only) else None
        """The network's actions-only path, where it has one (the same actions as ``act``)."""

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions ``[N, A]`` from the network."""
        self._check_obs(obs, self.obs_dim)
        if obs.device != self.device:
            raise ValueError(f"obs must be on {self.device}, got {obs.device}")
        if self._reads is not None:
            obs = obs[:, : self._reads]
        with torch.no_grad():
            if self._act_only is not None:
                if self._generator is not None:
                    return self._act_only(obs, deterministic=self.deterministic, generator=self._generator)
                return self._act_only(obs, deterministic=self.deterministic)
            # The policy is typed as the nn.Module it is; act() is checked in __init__.
            if self._generator is not None:
                seeded = cast(_SeededPolicyNetwork, self.policy)
                actions, _, _ = seeded.act(obs, deterministic=self.deterministic, generator=self._generator)
            else:
                plain = cast(PolicyNetwork, self.policy)
                actions, _, _ = plain.act(obs, deterministic=self.deterministic)
        return actions

    def to(self, device: torch.device | str) -> PolicyAgent:
        """Move the network (and the agent) to ``device``."""
        self.policy.to(device)
        super().to(device)
        self._generator = seeded_generator(self.device, self.seed) if self._takes_generator else None
        return self

    def train(self) -> PolicyAgent:
        """Put the network in training mode."""
        self.policy.train()
        super().train()
        return self

    def eval(self) -> PolicyAgent:
        """Put the network in evaluation mode."""
        self.policy.eval()
        super().eval()
        return self
