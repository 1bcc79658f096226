"""The pipeline's one configuration tree: frozen typed dataclasses, TOML loading, CLI overrides.

What a user writes (``--config FILE.toml``, then ``--set section.field=value``, then the named
command-line flags, later ones winning) is plain data: a nested dict. :func:`resolve` turns it
into a :class:`PipelineConfig` in one place: every value the user left out that depends on the
device (sizes, the PPO network and schedule, compiling) or on other values (ring slots, PPO
updates) is chosen there, so the typed tree holds no "not chosen yet" value, and the
``config.toml`` a run writes holds every value it used: ``--config RUN/config.toml`` trains the
same network with the same hyper-parameters on any device. Every bad name or value raises
:class:`ConfigError` naming it; ``pipeline.launch`` turns that into exit code 2.

The modules, one idea each: :mod:`~pipeline.config.sections` (the dataclasses),
:mod:`~pipeline.config.resolution` (user data to the tree: :func:`resolve`),
:mod:`~pipeline.config.validation` (range checks across sections: :func:`validate`),
:mod:`~pipeline.config.devices` (picking the device), :mod:`~pipeline.config.env_workers`
(a Gymnasium env's default worker count), :mod:`~pipeline.config.recipe` (the sim
policy's initial fire prior), :mod:`~pipeline.config.errors`, :mod:`~pipeline.config.files`
(TOML in and out), :mod:`~pipeline.config.flags` (the launcher's flags) and
:mod:`~pipeline.config.specs` (agents and rewards from specs). The names the rest of the tree
uses are re-exported here.
"""

from __future__ import annotations

from pipeline.config.devices import CUDA_STREAMS_PER_POOL, pick_device
from pipeline.config.errors import ConfigError
from pipeline.config.recipe import SIM_FIRE_LOGIT
from pipeline.config.resolution import resolve
from pipeline.config.sections import (
    ACTOR_PROCESSES,
    ACTOR_SCHEDS,
    DISPLAYS,
    LEAGUE,
    RING_PLACEMENTS,
    SNAPSHOT_CLOCKS,
    ActorsConfig,
    IntakeConfig,
    LeagueConfig,
    PipelineConfig,
    RingConfig,
    RunConfig,
)
from pipeline.config.validation import validate

__all__ = [
    "ACTOR_PROCESSES",
    "ACTOR_SCHEDS",
    "CUDA_STREAMS_PER_POOL",
    "DISPLAYS",
    "LEAGUE",
    "RING_PLACEMENTS",
    "SIM_FIRE_LOGIT",
    "SNAPSHOT_CLOCKS",
    "ActorsConfig",
    "ConfigError",
    "IntakeConfig",
    "LeagueConfig",
    "PipelineConfig",
    "RingConfig",
    "RunConfig",
    "pick_device",
    "resolve",
    "validate",
]
