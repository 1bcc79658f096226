"""The Gymnasium ids of the simulator, registered by name only.

:func:`register_envs` puts ``Midrange-v0`` (entry points in ``pipeline.envs.midrange``, which
builds the opponent and reward from the launcher's specs) and the scalar reference duel
(:data:`REFERENCE_ENV_ID`) into Gymnasium's registry. The registry holds only the entry points'
names, so this imports nothing but gymnasium, and no floor above ``sim`` (gymnasium imports the
env's module when ``make`` is called). ``import sim`` calls it; Gymnasium 1.x loads no plug-ins,
so a process that has not imported ``sim`` names an env with its module, as in
``gymnasium.make("sim:Midrange-v0")``.
"""

from __future__ import annotations

import gymnasium

MIDRANGE_ENV_ID = "Midrange-v0"
REFERENCE_ENV_ID = "midrange/ReferenceDuel-v0"


def register_envs() -> None:
    """Register the simulator's env ids (those already registered are left as they are)."""
    if MIDRANGE_ENV_ID not in gymnasium.registry:
        gymnasium.register(
            id=MIDRANGE_ENV_ID,
            entry_point="pipeline.envs.midrange:make_env",
            vector_entry_point="pipeline.envs.midrange:make_vector_env",
            max_episode_steps=None,
        )
    if REFERENCE_ENV_ID not in gymnasium.registry:
        gymnasium.register(id=REFERENCE_ENV_ID, entry_point="sim.reference.gym:ReferenceEnv")
