"""Who flies: the batched agent interface, scripted opponents and the neural-policy wrapper."""

from agents.base import BaseAgent, RandomAgent
from agents.policy import PolicyAgent
from agents.registry import SCRIPTED, make_agent
from agents.scripted import (
    CrankAgent,
    CrankConfig,
    PursuitAgent,
    ScriptedAgent,
    ShooterAgent,
    ShooterConfig,
    StraightAgent,
)

__all__ = [
    "SCRIPTED",
    "BaseAgent",
    "CrankAgent",
    "CrankConfig",
    "PolicyAgent",
    "PursuitAgent",
    "RandomAgent",
    "ScriptedAgent",
    "ShooterAgent",
    "ShooterConfig",
    "StraightAgent",
    "make_agent",
]
