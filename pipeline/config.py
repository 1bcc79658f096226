"""The pipeline's one configuration tree: frozen typed dataclasses, TOML loading, CLI overrides.

Precedence, lowest first: the defaults below, then ``--config FILE.toml``, then generic
``--set section.field=value`` overrides, then the named command-line flags. Fields left at
``None`` are chosen from the device by :func:`resolve` (CPU laptop vs GPU sizes), so the run
directory always holds the fully resolved values. Every bad name or value raises
:class:`ConfigError` naming it; ``pipeline.launch`` turns that into exit code 2.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.config import SimConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ConfigError(ValueError):
    """A bad configuration name or value; the message names it."""


CUDA_STREAMS_PER_POOL = 32
"""Streams in PyTorch's per-device pool of each priority (``torch.cuda.Stream()`` takes the
next one, round robin)."""
RING_PLACEMENTS = ("auto", "device", "pinned", "shared")
DISPLAYS = ("auto", "rich", "plain", "none")


@dataclass(frozen=True)
class RunConfig:
    """Where and how long the run goes."""

    device: str = "auto"
    """``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda`` or ``cuda:N``."""
    seed: int = 0
    """Seeds the sim scenarios, the policy initialisation and action sampling."""
    total_steps: int | None = None
    """Agent-steps (decisions of the learning fighter) to train for; None: by device."""
    run_dir: str = ""
    """Run directory (config, checkpoints, log); empty: ``runs/<UTC timestamp>``."""
    resume: str = ""
    """Checkpoint file or run directory to resume from; empty: start fresh."""
    sync: bool = False
    """Run actors and learner in turn without overlap (the baseline)."""
    display: str = "auto"
    """Live display: ``auto`` (rich on a terminal, plain lines otherwise), ``rich``, ``plain``,
    ``none``."""
    log_interval_s: float = 2.0
    """Seconds between progress lines / display refreshes and log entries."""
    checkpoint_interval_s: float = 60.0
    """Seconds between periodic checkpoints (one is always written at the end)."""
    keep_checkpoints: int = 3
    """How many numbered checkpoints to keep besides ``latest.pt``."""
    eval_episodes: int = 64
    """Episodes per scripted opponent in the end-of-run evaluation; 0 skips it."""
    actor_threads: int | None = None
    """Worker threads running actor chunks in async mode; None: on CPU one per core left after
    the learner's (CPU-bound threads beyond the cores only fight over the GIL), on CUDA one
    per actor (threads there only enqueue work)."""
    metrics_addr: str = "127.0.0.1"
    """Address the Prometheus exporter listens on (``0.0.0.0`` lets another host scrape)."""
    metrics_port: int = 9400
    """Prometheus exporter port (-1: off; 0: any free port). A busy port falls back to the next
    free one of the following 32, and the run says which it took. Under ``torchrun`` each rank
    exports on ``port + LOCAL_RANK`` with a ``rank`` label."""
    profile: int = 0
    """Record this many learner iterations (after one warm-up) with ``torch.profiler`` into
    ``trace.json`` in the run directory, with the overlap report beside it; 0: off."""
    max_actor_failures: int = 3
    """Actor crashes tolerated in total before the run stops with an error."""
    debug: bool = False
    """Fill ring slots with a magic value and check every chunk wrote every field."""
    cuda_graph: bool = True
    """Capture the rollout step as a CUDA graph (CUDA only)."""
    compile_sim: bool | None = None
    """Compile the sim step with ``torch.compile``; None: on CUDA only."""
    fail_actor_at_chunk: int = -1
    """Fault injection for tests: actor 0 raises while writing this chunk (-1: never)."""
    fail_actor_times: int = 1
    """Fault injection: how many successive incarnations of actor 0 fail that way."""


@dataclass(frozen=True)
class ActorsConfig:
    """The experience producers."""

    count: int = 4
    """Number of actors (each owns its own batch of environments)."""
    envs_per_actor: int | None = None
    """Environments per actor; None: by device."""
    rollout_len: int | None = None
    """Decision steps per chunk (T); None: by device."""
    opponent: str = "crank"
    """Opponent spec for ``agents.make_agent`` (scripted name, checkpoint or module:Class). The
    default ``crank`` fires and defends, so an untrained policy wins rarely and learning shows;
    the non-firing ``straight`` and ``pursuit`` lose even to random play."""
    reward: str = "shaped"
    """Reward spec for ``rewards.make_reward``."""
    learning_side: int = 0
    """Which fighter learns: 0 red, 1 blue (the opponent flies the other)."""


@dataclass(frozen=True)
class RingConfig:
    """The ring of preallocated rollout slots."""

    slots: int | None = None
    """Number of slots; None: two per actor."""
    placement: str = "auto"
    """``auto``, ``device``, ``pinned`` or ``shared`` (see ``pipeline.ring``)."""


@dataclass(frozen=True)
class LearnerConfig:
    """The consuming side."""

    slots_per_batch: int | None = None
    """Ring slots (chunks) concatenated into one PPO batch; None: min(actors, 2)."""
    max_policy_lag: int = 4
    """Chunks produced by a policy more than this many versions old are dropped (counted)."""


@dataclass(frozen=True)
class PipelineConfig:
    """The whole tree. ``ppo`` holds ``learner.PPOConfig`` overrides; ``sim`` the SimConfig."""

    run: RunConfig = field(default_factory=RunConfig)
    actors: ActorsConfig = field(default_factory=ActorsConfig)
    ring: RingConfig = field(default_factory=RingConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    ppo: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (TOML-able)."""
        out: dict[str, Any] = {}
        for name in ("run", "actors", "ring", "learner"):
            out[name] = dataclasses.asdict(getattr(self, name))
        out["sim"] = self.sim.to_dict()
        out["ppo"] = dict(self.ppo)
        return out

    @property
    def samples_per_chunk(self) -> int:
        """Agent-steps in one ring slot (rollout_len × envs_per_actor); needs a resolved config."""
        if self.actors.rollout_len is None or self.actors.envs_per_actor is None:
            raise ConfigError("samples_per_chunk needs a resolved config (see pipeline.config.resolve)")
        return self.actors.rollout_len * self.actors.envs_per_actor


SECTIONS: dict[str, type] = {
    "run": RunConfig,
    "actors": ActorsConfig,
    "ring": RingConfig,
    "learner": LearnerConfig,
}


def _check_type(where: str, value: Any, annotation: Any) -> Any:
    """Return ``value`` coerced to ``annotation`` or raise ConfigError naming ``where``."""
    hint = annotation
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where} must be a string, got {value!r}")
    return value


def _build_section(name: str, cls: type, data: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown option(s) in [{name}]: {', '.join(unknown)}")
    kwargs = {k: _check_type(f"{name}.{k}", v, hints[k]) for k, v in data.items()}
    return cls(**kwargs)


def from_dict(data: dict[str, Any]) -> PipelineConfig:
    """Build and validate a config from a nested dict (e.g. parsed TOML)."""
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a table, got {type(data).__name__}")
    unknown = sorted(set(data) - set(SECTIONS) - {"sim", "ppo"})
    if unknown:
        raise ConfigError(f"unknown config section(s): {', '.join(unknown)}")
    parts: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        table = data.get(name, {})
        if not isinstance(table, dict):
            raise ConfigError(f"[{name}] must be a table, got {table!r}")
        parts[name] = _build_section(name, cls, table)
    sim_table = data.get("sim", {})
    if not isinstance(sim_table, dict):
        raise ConfigError(f"[sim] must be a table, got {sim_table!r}")
    try:
        parts["sim"] = SimConfig.from_dict(sim_table)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"sim: {exc}") from None
    ppo_table = data.get("ppo", {})
    if not isinstance(ppo_table, dict):
        raise ConfigError(f"[ppo] must be a table, got {ppo_table!r}")
    parts["ppo"] = dict(ppo_table)
    config = PipelineConfig(**parts)
    validate(config)
    return config


def validate(config: PipelineConfig) -> None:
    """Range checks across the tree; raises ConfigError naming the field."""
    run, actors, ring, learner = config.run, config.actors, config.ring, config.learner
    dev = run.device
    if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
        raise ConfigError(f"run.device must be auto, cpu, cuda or cuda:N, got {dev!r}")
    if run.total_steps is not None and run.total_steps < 1:
        raise ConfigError(f"run.total_steps must be >= 1, got {run.total_steps}")
    if run.display not in DISPLAYS:
        raise ConfigError(f"run.display must be one of {', '.join(DISPLAYS)}, got {run.display!r}")
    for name in ("log_interval_s", "checkpoint_interval_s"):
        if getattr(run, name) <= 0:
            raise ConfigError(f"run.{name} must be > 0, got {getattr(run, name)}")
    if not isinstance(run.metrics_addr, str) or not run.metrics_addr.strip():
        raise ConfigError(f"run.metrics_addr must be a host address, got {run.metrics_addr!r}")
    if run.profile < 0:
        raise ConfigError(f"run.profile must be >= 0 learner iterations, got {run.profile}")
    if not -1 <= run.metrics_port <= 65535:
        raise ConfigError(f"run.metrics_port must be -1 (off) or a port 0..65535, got {run.metrics_port}")
    if run.actor_threads is not None and run.actor_threads < 1:
        raise ConfigError(f"run.actor_threads must be >= 1, got {run.actor_threads}")
    for name in ("keep_checkpoints", "max_actor_failures"):
        if getattr(run, name) < 1:
            raise ConfigError(f"run.{name} must be >= 1, got {getattr(run, name)}")
    if run.eval_episodes < 0:
        raise ConfigError(f"run.eval_episodes must be >= 0, got {run.eval_episodes}")
    if actors.count < 1:
        raise ConfigError(f"actors.count must be >= 1, got {actors.count}")
    for name in ("envs_per_actor", "rollout_len"):
        value = getattr(actors, name)
        if value is not None and value < 1:
            raise ConfigError(f"actors.{name} must be >= 1, got {value}")
    if actors.learning_side not in (0, 1):
        raise ConfigError(f"actors.learning_side must be 0 or 1, got {actors.learning_side}")
    for name in ("opponent", "reward"):
        if not getattr(actors, name).strip():
            raise ConfigError(f"actors.{name} must not be empty")
    if ring.placement not in RING_PLACEMENTS:
        raise ConfigError(
            f"ring.placement must be one of {', '.join(RING_PLACEMENTS)}, got {ring.placement!r}"
        )
    if ring.slots is not None and ring.slots < 1:
        raise ConfigError(f"ring.slots must be >= 1, got {ring.slots}")
    if learner.slots_per_batch is not None and learner.slots_per_batch < 1:
        raise ConfigError(f"learner.slots_per_batch must be >= 1, got {learner.slots_per_batch}")
    if learner.max_policy_lag < 0:
        raise ConfigError(f"learner.max_policy_lag must be >= 0, got {learner.max_policy_lag}")
    spb = learner.slots_per_batch
    if ring.slots is not None and spb is not None and spb > ring.slots:
        raise ConfigError(
            f"learner.slots_per_batch ({spb}) must be <= ring.slots ({ring.slots}), "
            "or the learner could never fill a batch"
        )


def load_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML config file; a missing or malformed file raises ConfigError naming it."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--config: no such file: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config: {path} is not valid TOML: {exc}") from None


def parse_value(text: str) -> Any:
    """A ``--set`` value: TOML syntax (``3``, ``1.5``, ``true``, ``"x"``) or a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``section.field`` (``sim.fighter.lift_to_drag`` nests) in a nested dict in place."""
    parts = key.split(".")
    if len(parts) < 2 or not all(parts):
        raise ConfigError(f"--set key must look like section.field, got {key!r}")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {part} is not a table")
        node = child
    node[parts[-1]] = value


def _device_is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def resolve(config: PipelineConfig, device: str) -> PipelineConfig:
    """Fill every ``None`` field with the default for ``device`` (a concrete torch device string).

    CPU defaults are sized so ``python -m pipeline.launch --actors 4`` trains visibly within
    minutes on a 2-core laptop; GPU defaults are sized to fill the device.
    """
    cuda = _device_is_cuda(device)
    actors = config.actors
    if cuda and actors.count > CUDA_STREAMS_PER_POOL:
        raise ConfigError(
            f"actors.count is {actors.count}, but on CUDA at most {CUDA_STREAMS_PER_POOL} actors run "
            "in one process: each needs a stream of its own, and PyTorch's pool has "
            f"{CUDA_STREAMS_PER_POOL} per device (more actors would share streams and serialize)"
        )
    envs = actors.envs_per_actor or (8192 if cuda else 64)
    rollout = actors.rollout_len or (32 if cuda else 16)
    total = config.run.total_steps or (2_000_000_000 if cuda else 600_000)
    slots = config.ring.slots or 2 * actors.count
    spb = config.learner.slots_per_batch or min(actors.count, 2)
    if spb > slots:
        raise ConfigError(
            f"learner.slots_per_batch ({spb}) must be <= ring.slots ({slots}), "
            "or the learner could never fill a batch"
        )
    compile_sim = config.run.compile_sim if config.run.compile_sim is not None else cuda
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    actor_threads = config.run.actor_threads or (
        actors.count if cuda else max(1, min(actors.count, cores - 1))
    )
    resolved = dataclasses.replace(
        config,
        run=dataclasses.replace(config.run, device=device, total_steps=total, compile_sim=compile_sim,
                                actor_threads=actor_threads),
        actors=dataclasses.replace(actors, envs_per_actor=envs, rollout_len=rollout),
        ring=dataclasses.replace(config.ring, slots=slots),
        learner=dataclasses.replace(config.learner, slots_per_batch=spb),
    )
    validate(resolved)
    return resolved


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ConfigError(f"cannot write {value!r} to TOML")


def to_toml(data: dict[str, Any]) -> str:
    """Write a nested dict of scalars / lists / tables as TOML (None values are left out)."""
    lines: list[str] = []

    def table(prefix: str, node: dict[str, Any]) -> None:
        scalars = {k: v for k, v in node.items() if not isinstance(v, dict) and v is not None}
        subs = {k: v for k, v in node.items() if isinstance(v, dict)}
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in scalars.items())
        lines.append("")
        for k, v in subs.items():
            table(f"{prefix}.{k}" if prefix else k, v)

    table("", data)
    return "\n".join(lines).lstrip("\n")
