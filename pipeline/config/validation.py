"""Range checks of a built :class:`PipelineConfig` across its sections, the league's included."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from pathlib import Path

from agents.registry import AGENT_NAMES, looks_like_checkpoint, names_a_path
from agents.tactics import is_tactic_spec, parse_tactic_spec
from core.bounds import check_bounds, shown
from pipeline.config.devices import CUDA_STREAMS_PER_POOL, device_is_cuda
from pipeline.config.errors import ConfigError
from pipeline.config.sections import (
    ACTOR_PROCESSES,
    ACTOR_SCHEDS,
    DISPLAYS,
    LEAGUE,
    RING_PLACEMENTS,
    SECTION_BOUNDS,
    SNAPSHOT_CLOCKS,
    PipelineConfig,
)
from pipeline.envs.choice import check_env_spec


def validate(config: PipelineConfig) -> None:
    """Range checks of the [run], [actors], [ring], [intake] and [league] sections (each number
    against :data:`~pipeline.config.sections.SECTION_BOUNDS`, then the checks across fields;
    [sim] and [ppo] check themselves); raises ConfigError naming the field."""
    run, actors, ring, intake = config.run, config.actors, config.ring, config.intake
    for name, bounds in SECTION_BOUNDS.items():
        check_bounds(getattr(config, name), bounds, name, ConfigError)
        check_text(name, getattr(config, name))
    if run.stop_steps > run.total_steps:
        raise ConfigError(f"run.stop_steps ({run.stop_steps:,}) must be at most run.total_steps "
                          f"({run.total_steps:,}), or 0 (train the whole budget)")
    dev = run.device
    if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
        raise ConfigError(f"run.device must be auto, cpu, cuda or cuda:N, got {dev!r}")
    if run.display not in DISPLAYS:
        raise ConfigError(f"run.display must be one of {', '.join(DISPLAYS)}, got {run.display!r}")
    if not isinstance(run.metrics_addr, str) or not run.metrics_addr.strip():
        raise ConfigError(f"run.metrics_addr must be a host address, got {run.metrics_addr!r}")
    if run.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("run.tensorboard needs the tensorboard package: pip install 'midrange-rl[tensorboard]'")
    if actors.workers_per_actor > actors.envs_per_actor:
        raise ConfigError(f"actors.workers_per_actor ({actors.workers_per_actor}) must be <= "
                          f"actors.envs_per_actor ({actors.envs_per_actor})")
    try:
        check_env_spec(actors.env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for name in ("opponent", "reward"):
        if not getattr(actors, name).strip():
            raise ConfigError(f"actors.{name} must not be empty")
    if actors.env == "midrange" and actors.opponent.strip() != LEAGUE:
        check_agent_spec("actors.opponent", actors.opponent)
    if actors.processes not in ACTOR_PROCESSES:
        raise ConfigError(f"actors.processes must be one of {', '.join(ACTOR_PROCESSES)}, "
                          f"got {actors.processes!r}")
    if actors.sched not in ACTOR_SCHEDS:
        raise ConfigError(f"actors.sched must be one of {', '.join(ACTOR_SCHEDS)}, got {actors.sched!r}")
    if actors.sched == "idle" and not hasattr(os, "SCHED_IDLE"):
        raise ConfigError("actors.sched = idle needs Linux's SCHED_IDLE scheduling class; this host "
                          "has none (use normal, and actors.nice)")
    if actors.processes == "on":
        if actors.env != "midrange":
            raise ConfigError(f"actors.processes = on is for the sim; --env {actors.env} actors stay "
                              "threads (their envs already step in worker processes)")
        if device_is_cuda(dev):
            raise ConfigError("actors.processes = on needs run.device cpu: on CUDA the actors and the "
                              "learner of a device share one process, where their streams overlap")
        if ring.placement not in ("auto", "shared"):
            raise ConfigError(f"actors.processes = on writes a shared-memory ring; ring.placement "
                              f"{ring.placement!r} cannot cross processes (use auto or shared)")
    if ring.placement not in RING_PLACEMENTS:
        raise ConfigError(
            f"ring.placement must be one of {', '.join(RING_PLACEMENTS)}, got {ring.placement!r}"
        )
    if intake.slots_per_batch > ring.slots:
        raise ConfigError(
            f"intake.slots_per_batch ({intake.slots_per_batch}) must be <= ring.slots "
            f"({ring.slots}), or the learner could never fill a batch"
        )
    _validate_league(config)
    if device_is_cuda(run.device) and actors.count > CUDA_STREAMS_PER_POOL:
        raise ConfigError(
            f"actors.count is {actors.count}, but on CUDA at most {CUDA_STREAMS_PER_POOL} actors run "
            "in one process: each needs a stream of its own, and PyTorch's pool has "
            f"{CUDA_STREAMS_PER_POOL} per device (more actors would share streams and serialize)"
        )


MAX_TEXT_CHARS = 4096
"""The longest string a section holds (a path's limit on Linux)."""


def check_text(where: str, section: object) -> None:
    """Refuse control characters (a line break, a tab, NUL) in a section's strings, and strings
    longer than :data:`MAX_TEXT_CHARS`: they name files, hosts, devices and specs, where no
    control character means anything and NUL breaks every path."""
    for f in dataclasses.fields(section):  # type: ignore[arg-type]
        value = getattr(section, f.name)
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, str):
                continue
            if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in item):
                raise ConfigError(f"{where}.{f.name} must not hold control characters (a line break, "
                                  f"a tab, NUL), got {shown(item)}")
            if len(item) > MAX_TEXT_CHARS:
                raise ConfigError(f"{where}.{f.name} must be at most {MAX_TEXT_CHARS} characters, got "
                                  f"{len(item)}")


def _validate_league(config: PipelineConfig) -> None:
    league = config.league
    if league.snapshot_clock not in SNAPSHOT_CLOCKS:
        raise ConfigError(f"league.snapshot_clock must be one of {', '.join(SNAPSHOT_CLOCKS)}, "
                          f"got {league.snapshot_clock!r}")
    for anchor in league.anchors:
        if not anchor.strip() or anchor.strip() == LEAGUE:
            raise ConfigError(f"league.anchors: {anchor!r} is not an opponent")
        check_agent_spec("league.anchors", anchor)
    if len(set(league.anchors)) != len(league.anchors):
        raise ConfigError(f"league.anchors names an opponent twice: {league.anchors}")
    if config.actors.opponent != LEAGUE:
        return
    if not league.anchors:
        raise ConfigError("league.anchors is empty: the league would have no opponent before its "
                          "first snapshot (name at least one, e.g. crank)")
    if config.actors.envs_per_actor % league.groups_per_actor:
        raise ConfigError(f"league.groups_per_actor ({league.groups_per_actor}) must divide "
                          f"actors.envs_per_actor ({config.actors.envs_per_actor})")


def check_agent_spec(where: str, spec: str) -> None:
    """Refuse an agent spec that can build nothing: a bare name that is no scripted agent or champion, or a
    checkpoint path where no file or folder is. A ``package.module:Name`` import path is left to
    the build (which reports its errors in one line)."""
    spec = spec.strip()
    if is_tactic_spec(spec):
        try:
            parse_tactic_spec(spec)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return
    if spec in AGENT_NAMES or (":" in spec and not names_a_path(spec)):
        return
    try:
        if looks_like_checkpoint(spec) or names_a_path(spec):
            if not Path(spec).exists():
                raise ConfigError(f"{where}: no checkpoint at {shown(spec)}")
            return
    except OSError:  # a name too long for a path
        pass
    raise ConfigError(f"{where}: unknown agent {shown(spec)}: expected one of {', '.join(AGENT_NAMES)}, a "
                      "tactic 'tactic:NAME', a checkpoint path (.pt file or run directory) or an import path 'package.module:ClassName'")
