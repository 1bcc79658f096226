"""Experience producers: sim actors that run environments, a policy replica, an opponent and a
reward, and write rollout chunks into ring slots."""

from actors.sim_actor import ContractViolation, DecisionStep, SimActor, StepTargets
from actors.stats import EpisodeStats, EpisodeSummary

__all__ = ["ContractViolation", "DecisionStep", "EpisodeStats", "EpisodeSummary", "SimActor", "StepTargets"]
