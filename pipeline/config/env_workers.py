"""How many worker processes step a Gymnasium env for each actor, from a short probe of its step
cost."""

from __future__ import annotations

from typing import Any

from pipeline.config.devices import usable_cores
from pipeline.config.errors import ConfigError
from pipeline.envs.choice import EnvFactory, check_env_spec, default_workers, measure_step_seconds


def measured_workers(env: str, actors: dict[str, Any], count: int) -> int:
    """Worker processes per actor for a Gymnasium env left to its default: the env is made
    and stepped for a fifth of a second, and ``pipeline.envs.choice.default_workers`` decides by its
    step cost and the core count (the choice is written to ``config.toml``, so a resumed or
    repeated run keeps it)."""
    kwargs = actors.get("env_kwargs", {})
    envs = actors.get("envs_per_actor")
    if not isinstance(kwargs, dict) or not isinstance(envs, int) or isinstance(envs, bool) or envs < 1:
        return 0  # the checks below name the bad value
    try:
        check_env_spec(env)
        step_s = measure_step_seconds(EnvFactory(env, kwargs))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return default_workers(step_s, envs, count, usable_cores())
