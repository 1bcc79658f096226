"""Who flies a side of the fight: a person (:class:`HumanSeat`, driven by the page's input
messages) or an agent (:class:`AgentSeat`, built from any spec the launcher takes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from agents.base import BaseAgent, bad_actions_message, check_agent_actions
from agents.registry import SCRIPTED
from learner.checkpoint import resolve_checkpoint_path
from pipeline.config.specs import build_agent
from sim import ObsLayout, SimConfig
from sim.actions import RUDDER_LEVELS, THROTTLE_LEVELS

HUMAN = "human"
"""The spec of a seat flown from the page."""

SIDES = ("red", "blue")
"""Side names, in the simulator's order (0 red, 1 blue)."""


@dataclass
class Controls:
    """The latest input of a human seat: rudder in {-1, 0, 1}, throttle in {0, 0.5, 1}, fire,
    and the sequence number of the input message that set them (echoed in every state)."""

    rudder: float = 0.0
    throttle: float = 1.0
    fire: bool = False
    seq: int = 0


@dataclass
class HumanSeat:
    """A side flown from the page: its action is the latest :class:`Controls` received."""

    spec: str = HUMAN
    controls: Controls = field(default_factory=Controls)

    def action(self, obs: torch.Tensor, step: int, action_mode: str) -> torch.Tensor:
        """The action ``[3]`` the held controls give, in the simulator's action format."""
        c = self.controls
        if action_mode == "discrete":
            return torch.tensor([RUDDER_LEVELS.index(c.rudder), THROTTLE_LEVELS.index(c.throttle), int(c.fire)])
        return torch.tensor([c.rudder, c.throttle, float(c.fire)], dtype=obs.dtype)

    def reset(self) -> None:
        """A new round, or its pilot gone: the controls go back to straight ahead at full
        throttle (the sequence number is kept, so the page's echo check still holds)."""
        seq = self.controls.seq
        self.controls = Controls(seq=seq)


@dataclass
class AgentSeat:
    """A side flown by an agent, which decides every ``decide_every`` steps and holds its
    action in between, so it decides as often in sim time as it was trained to."""

    spec: str
    agent: BaseAgent
    decide_every: int
    source: str = ""
    """The checkpoint file the seat flies (empty for scripted agents and import paths)."""
    _held: torch.Tensor | None = None

    def action(self, obs: torch.Tensor, step: int, action_mode: str) -> torch.Tensor:
        """The agent's action ``[3]`` for this step (a fresh decision on every
        ``decide_every``-th). Actions of the wrong shape, type or range raise ``ValueError``
        naming the agent."""
        if self._held is None or step % self.decide_every == 0:
            with torch.no_grad():
                actions = self.agent.act(obs.unsqueeze(0))
            who = f"agent {self.spec!r}"
            if bool(check_agent_actions(actions, 1, action_mode, who)):
                raise ValueError(bad_actions_message(who, action_mode))
            self._held = actions[0].clone()
        return self._held

    def reset(self) -> None:
        """A new round: forget the held action and the agent's memory."""
        self._held = None
        self.agent.reset(torch.ones(1, dtype=torch.bool))


Seat = HumanSeat | AgentSeat


def checkpoint_source(spec: str) -> str:
    """The checkpoint file ``spec`` names, or ``""`` when it names none (a scripted name, an
    import path, ``human``)."""
    if spec == HUMAN or spec in SCRIPTED or (":" in spec and not Path(spec).exists()):
        return ""
    try:
        return str(resolve_checkpoint_path(spec))
    except ValueError:
        return ""


def build_seat(spec: str, side: int, sim_config: SimConfig, decide_every: int, seed: int = 0) -> Seat:
    """The seat ``spec`` names for side ``side``: ``human``, or an agent built by
    ``pipeline.config.specs.build_agent`` (a scripted name, a checkpoint file, folder or run
    directory, a league snapshot, ``package.module:Class``). A bad spec raises ``ValueError``
    with one line naming it."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{SIDES[side]} seat: agent spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec == HUMAN:
        return HumanSeat()
    layout = ObsLayout.from_config(sim_config)
    agent = build_agent(spec, 1, layout, "cpu", seed=seed * 2 + side, action_mode=sim_config.action_mode,
                        sim_config=sim_config).eval()
    return AgentSeat(spec, agent, decide_every, checkpoint_source(spec))
