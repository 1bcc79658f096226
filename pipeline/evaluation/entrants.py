"""The entrants of an evaluation: league folders expanded into their pools, every entrant built
once before play, and the simulator (or Gymnasium env) the checkpoints among them were trained on."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agents.champions import CHAMPIONS
from learner.checkpoint import list_checkpoints, read_checkpoint, resolve_checkpoint_path
from pipeline.config.specs import build_agent
from pipeline.league.state import STATE_FILE, read_state
from sim import ObsLayout, SimConfig


def expand_pools(names: list[str]) -> list[str]:
    """Entrants with every league folder (``RUN/league``, holding ``league.json``) replaced by
    its snapshots, oldest first, and its anchors not already named."""
    out: list[str] = []
    for name in names:
        folder = Path(name)
        state = folder / STATE_FILE
        if not (folder.is_dir() and state.is_file()):
            out.append(name)
            continue
        saved = read_state(state)  # a damaged file: a ConfigError (a ValueError) naming it
        anchors = saved.anchors if saved is not None else []
        snapshots = [str(p) for p in list_checkpoints(folder)]
        if not snapshots:
            raise ValueError(f"league folder {folder} holds no snapshot yet")
        out += snapshots + [a for a in anchors if a not in names and a not in out]
    return out


def check_entrants(specs: list[str], sim_config: SimConfig, device: str) -> None:
    """Build every entrant once, before any match: an unknown name, a missing or damaged
    checkpoint, or one of another observation layout or action mode is a one-line
    ``ValueError`` now rather than after the matches before it were played."""
    layout = ObsLayout.from_config(sim_config)
    for spec in dict.fromkeys(specs):
        build_agent(spec, 1, layout, device, action_mode=sim_config.action_mode, sim_config=sim_config)


def trained_sim_config(specs: list[str]) -> SimConfig:
    """The simulator the checkpoints among ``specs`` were trained on (their run's ``[sim]`` section;
    a champion's name counts as its packaged file), so that a policy trained with, say,
    ``sim.obs_reach = true`` is judged on the sim it knows, with the rules' start
    (``SimConfig.rules_start``: no training curriculum); the default ``SimConfig`` when none is a
    checkpoint. Checkpoints trained on different sims cannot meet in one match: a ``ValueError``
    names two of them. Past frames (``obs_history``) do not count as a difference: the sim keeps the
    most any of them reads, and a network with fewer reads the first frames
    (``ObsLayout.frames_prefix``). Nor does a trace (``obs_trace_s``) between a checkpoint with one
    and checkpoints without: the sim keeps it and those read the frame before it; two different time
    constants cannot meet. Nor does the reach block (``obs_reach``) between a checkpoint with it and
    one without: the sim has it and that one reads the frame before the block, if it has no memory
    of its own."""
    found: dict[SimConfig, str] = {}
    traces: dict[float, str] = {}
    history, reach = 0, False
    for spec in specs:
        try:
            path = CHAMPIONS[spec] if spec in CHAMPIONS else resolve_checkpoint_path(spec)
        except ValueError:
            continue  # a scripted name or an import path
        sim = ((read_checkpoint(path).get("extra") or {}).get("config") or {}).get("sim")
        if isinstance(sim, dict):
            config = SimConfig.from_dict(sim)
            history, reach = max(history, config.obs_history), reach or config.obs_reach
            if config.obs_trace_s > 0:
                traces.setdefault(float(config.obs_trace_s), str(path))
            found.setdefault(dataclasses.replace(config.rules_start(), scenario="random", obs_history=0,
                                                 obs_trace_s=0.0, obs_reach=False), str(path))
    if len(traces) > 1:
        (ta, pa), (tb, pb) = list(traces.items())[:2]
        raise ValueError(f"{pa} and {pb} were trained on different sims (obs_trace_s: {ta!r} != {tb!r}); "
                         "they cannot meet in one match")
    if len(found) > 1:
        (a, pa), (b, pb) = list(found.items())[:2]
        diff = ", ".join(f"{k}: {getattr(a, k)!r} != {getattr(b, k)!r}"
                         for k in (f.name for f in dataclasses.fields(SimConfig)) if getattr(a, k) != getattr(b, k))
        raise ValueError(f"{pa} and {pb} were trained on different sims ({diff}); they cannot meet in one match")
    return dataclasses.replace(next(iter(found), SimConfig()), obs_history=history,
                               obs_trace_s=next(iter(traces), 0.0), obs_reach=reach)


def gym_env_of(agent: str) -> tuple[str, dict] | None:
    """The Gymnasium env (spec, kwargs) a checkpoint was trained on, or None (the sim, or not a
    checkpoint at all)."""
    try:
        path = resolve_checkpoint_path(agent)
    except ValueError:
        return None
    state = read_checkpoint(path)
    layout = state.get("obs_layout") or {}
    if not isinstance(layout, dict) or "env" not in layout:
        return None
    actors = (state.get("extra", {}).get("config") or {}).get("actors", {})
    return str(layout["env"]), dict(actors.get("env_kwargs", {}))
