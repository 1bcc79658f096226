"""The batched beyond-visual-range duel simulator (sim.md, sim/RULES.md).

Importing ``sim`` registers the Gymnasium environment ``Midrange-v0``.
"""

from sim.batched import BatchedSim, StepResult
from sim.config import AeroParams, SimConfig
from sim.device import canonical_device
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


def _register() -> None:
    import gymnasium

    if "Midrange-v0" not in gymnasium.registry:
        gymnasium.register(
            id="Midrange-v0",
            entry_point="sim.gym:MidrangeEnv",
            vector_entry_point="sim.gym:MidrangeVectorEnv",
            max_episode_steps=None,
        )


_register()
