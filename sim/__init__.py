"""The batched beyond-visual-range duel simulator (sim.md, sim/RULES.md).

Importing ``sim`` registers the Gymnasium environment ``Midrange-v0``. Its entry points live in
``pipeline.envs.midrange``, which builds the opponent and reward from the launcher's specs; the
registry holds only their names, so nothing here imports a floor above ``sim`` (gymnasium
imports that module when ``make`` is called).
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
            entry_point="pipeline.envs.midrange:make_env",
            vector_entry_point="pipeline.envs.midrange:make_vector_env",
            max_episode_steps=None,
        )


_register()
