"""Who flies: the batched agent interface, scripted opponents, the tactic library and the
neural-policy wrapper."""

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
from agents.tactics import HELDOUT, TACTICS, TRAINING, TacticAgent

__all__ = [
    "HELDOUT",
    "SCRIPTED",
    "TACTICS",
    "TRAINING",
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
    "TacticAgent",
    "make_agent",
]
