"""The batched beyond-visual-range duel simulator (sim.md, sim/RULES.md).

Importing ``sim`` registers the Gymnasium environments ``Midrange-v0`` and the scalar reference
duel (``sim.envs.registration``: by name only, so nothing here imports a floor above ``sim``);
a process that has not imported ``sim`` makes them as ``gymnasium.make("sim:Midrange-v0")``.
"""

from sim.batched import BatchedSim, StepResult
from sim.config import AeroParams, SimConfig
from sim.device import canonical_device
from sim.envs.registration import register_envs
from sim.kernels import END_REASONS, WINNERS
from sim.layout import ObsLayout
from sim.state import SimState

__all__ = [
    "END_REASONS",
    "WINNERS",
    "AeroParams",
    "BatchedSim",
    "ObsLayout",
    "SimConfig",
    "SimState",
    "StepResult",
    "canonical_device",
]


register_envs()
