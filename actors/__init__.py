"""Experience producers: sim actors that run environments, a policy replica, an opponent and a
reward, and write rollout chunks into ring slots."""

from actors.sim_actor import SimActor
from actors.stats import EpisodeStats, EpisodeSummary
from actors.step import ContractViolation, DecisionStep, StepTargets

__all__ = ["ContractViolation", "DecisionStep", "EpisodeStats", "EpisodeSummary", "SimActor", "StepTargets"]
