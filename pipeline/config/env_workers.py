"""How many worker processes step a Gymnasium env for each actor when the config leaves it out."""

from __future__ import annotations

from typing import Any

from pipeline.config.devices import usable_cores
from pipeline.envs.choice import default_workers


def default_workers_per_actor(env: str, actors: dict[str, Any], count: int) -> int:
    """Worker processes per actor for a Gymnasium env left to its default, by the rule of
    ``pipeline.envs.choice.default_workers`` (from the env, the actor's envs, the actors and
    the usable cores; nothing is timed). The choice is written to ``config.toml``, so a resumed
    or repeated run keeps it."""
    envs = actors.get("envs_per_actor")
    if not isinstance(envs, int) or isinstance(envs, bool) or envs < 1:
        return 0  # the checks of the resolved config name the bad value
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return 0
    return default_workers(env, envs, count, usable_cores())
