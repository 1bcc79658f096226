"""Command-line flags of ``python -m pipeline.launch``, mapped onto the config tree.

Each named flag is a shortcut for one ``section.field``; ``--set section.field=value`` reaches
every other field (including ``sim.*`` and ``ppo.*``). Argparse rejects a malformed flag with
exit code 2; :func:`parse_config` raises :class:`ConfigError` for a bad name or value, which
``launch`` also turns into exit code 2.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from core.bounds import shown
from core.command import CommandParser
from pipeline.config.errors import ConfigError
from pipeline.config.files import (
    MAX_NESTING,
    MAX_VALUE_CHARS,
    apply_override,
    load_toml,
    nesting,
    parse_value,
)
from pipeline.config.sections import ACTOR_PROCESSES, DISPLAYS, RING_PLACEMENTS
from pipeline.run.rundir import run_dir_of

# flag dest -> config key
FLAG_KEYS: dict[str, str] = {
    "actors": "actors.count",
    "envs_per_actor": "actors.envs_per_actor",
    "rollout_len": "actors.rollout_len",
    "env": "actors.env",
    "env_kwargs": "actors.env_kwargs",
    "workers_per_actor": "actors.workers_per_actor",
    "actor_processes": "actors.processes",
    "opponent": "actors.opponent",
    "reward": "actors.reward",
    "ring_slots": "ring.slots",
    "ring": "ring.placement",
    "sync": "run.sync",
    "device": "run.device",
    "total_steps": "run.total_steps",
    "seed": "run.seed",
    "run_dir": "run.run_dir",
    "resume": "run.resume",
    "display": "run.display",
    "debug": "run.debug",
    "cuda_graph": "run.cuda_graph",
    "time_scale": "sim.time_scale",
    "max_policy_lag": "intake.max_policy_lag",
    "slots_per_batch": "intake.slots_per_batch",
    "metrics_port": "run.metrics_port",
    "metrics_addr": "run.metrics_addr",
    "profile": "run.profile",
    "tensorboard": "run.tensorboard",
}


def build_parser() -> argparse.ArgumentParser:
    """The launcher's argument parser."""
    p = CommandParser(
        prog="python -m pipeline.launch",
        description="Train a mid-range air-combat policy with async actors and a PPO learner.",
        allow_abbrev=False,
    )
    p.add_argument("--config", metavar="FILE.toml", help="TOML file with [run], [actors], [ring], "
                   "[intake], [sim] and [ppo] tables")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override any field, e.g. --set ppo.learning_rate=1e-3 (repeatable)")
    p.add_argument("--actors", type=int, help="number of actors (default 4)")
    p.add_argument("--env", help="what the actors run: midrange (the air-combat sim, default), "
                   "gym:ID (a registered Gymnasium env, e.g. gym:CartPole-v1) or package.module:factory")
    p.add_argument("--env-kwargs", type=parse_kwargs, metavar="JSON|TOML",
                   help="keyword arguments of the Gymnasium env, as JSON ('{\"g\": 9.8}') or a "
                   "TOML inline table ('{g = 9.8}')")
    p.add_argument("--workers-per-actor", type=int,
                   help="worker processes per actor for a Gymnasium env (0: in the actor's "
                   "process; default: 0 for Gymnasium's own envs, else the cores shared between "
                   "the actors)")
    p.add_argument("--envs-per-actor", type=int, help="environments per actor (default by device)")
    p.add_argument("--actor-processes", choices=ACTOR_PROCESSES,
                   help="sim actors in worker processes of their own, CPU only (default auto: threads)")
    p.add_argument("--rollout-len", type=int, help="decision steps per chunk (default by device)")
    p.add_argument("--ring-slots", type=int, help="ring slots (default 2 per actor)")
    p.add_argument("--ring", choices=RING_PLACEMENTS, help="slot placement (default auto)")
    p.add_argument("--slots-per-batch", type=int, help="chunks per PPO batch (default min(actors, 2))")
    p.add_argument("--sync", action="store_true", default=None,
                   help="run actors and learner in turn, without overlap (the baseline)")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--total-steps", type=int, help="agent-steps to train for (default by device)")
    p.add_argument("--time-scale", type=float, help="sim time per decision relative to default")
    p.add_argument("--opponent", help="opponent: league (the default: self-play against past "
                   "selves and scripted anchors), or one of straight, pursuit, shooter, crank, "
                   "random, the champions ace, ace2 and ace3, a tactic such as tactic:skate (docs/tactics.md), a checkpoint "
                   "path or package.module:Class")
    p.add_argument("--reward", help="reward: zero, outcome, shaped, draw, wasted, closing, hunt, a "
                   "weighted sum such as shaped+-0.5*draw, or package.module:Class")
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--run-dir", help="run directory (default runs/<UTC timestamp>)")
    p.add_argument("--resume", help="checkpoint file or run directory to resume from (a run "
                   "directory is continued in place with its config.toml; flags still override)")
    p.add_argument("--max-policy-lag", type=int, help="drop chunks more than this many versions old")
    p.add_argument("--metrics-addr", help="Prometheus exporter address (default 127.0.0.1)")
    p.add_argument("--metrics-port", type=int,
                   help="Prometheus exporter port (default 9400, the next free one if busy; "
                   "0: any free port; -1: off)")
    p.add_argument("--profile", type=int, nargs="?", const=5, metavar="ITERATIONS",
                   help="record ITERATIONS learner iterations (default 5) with torch.profiler into "
                   "RUN_DIR/trace.json and report actor/learner overlap")
    p.add_argument("--display", choices=DISPLAYS, help="live display (default auto)")
    p.add_argument("--tensorboard", action="store_true", default=None,
                   help="also write TensorBoard event files into RUN_DIR/tensorboard (RUN_DIR/progress.csv "
                   "is always written)")
    p.add_argument("--debug", action="store_true", default=None,
                   help="fill ring slots with a magic value and check every chunk")
    p.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false", default=None,
                   help="run the rollout step eagerly on CUDA")
    return p


def parse_kwargs(text: str) -> dict[str, Any]:
    """``--env-kwargs``: a JSON object or a TOML inline table (as long and as deeply nested as
    a ``--set`` value may be)."""
    try:
        if nesting(text) > MAX_NESTING:  # json.loads recurses as deep as the text nests
            raise ConfigError(f"lists and tables nested {nesting(text)} deep (at most {MAX_NESTING})")
        try:
            value = json.loads(text) if len(text) <= MAX_VALUE_CHARS else None
        except json.JSONDecodeError:
            value = None
        if value is None:
            value = parse_value(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object or a TOML inline table, got {shown(text)}")
    return value


def parse_config(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse flags into config data (``pipeline.config.resolve`` makes the typed tree of it)."""
    args = build_parser().parse_args(argv)
    data: dict[str, Any] = load_toml(args.config) if args.config else {}
    resumed_run = run_dir_of(args.resume) if args.resume else None
    if resumed_run is not None and not args.config:
        # --resume RUN continues that run: its config, in its directory, unless told otherwise.
        data = load_toml(resumed_run / "config.toml")
        data.setdefault("run", {})["run_dir"] = str(resumed_run)
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set needs KEY=VALUE, got {item!r}")
        try:
            parsed = parse_value(value.strip())
        except ConfigError as exc:
            raise ConfigError(f"--set {key.strip()[:60]}: {exc}") from None
        apply_override(data, key.strip(), parsed)
    for dest, key in FLAG_KEYS.items():
        value = getattr(args, dest)
        if value is not None:
            apply_override(data, key, value)
    return data
