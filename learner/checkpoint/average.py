"""Checkpoint averaging: one policy whose weights are the mean of several checkpoints' weights.

The last iterate of a learner in a two-player game keeps moving around what it is chasing; the
mean of its recent iterates moves less and is often the stronger, steadier policy (the average
of late checkpoints in machine translation, Vaswani et al. 2017; stochastic weight averaging,
Izmailov et al. 2018; in games, the averaged iterate that fictitious play converges with). Here
the mean is taken after the fact, over the numbered checkpoints a run keeps, so neither the
actors nor the learner change.

Every parameter of the network is the uniform mean of the checkpoints' (in float64, stored in
the parameter's dtype). Buffers (the running observation statistics) are not averaged: the
newest checkpoint's are kept, since they are totals over the whole run, which late checkpoints
barely move. The result is a policy-only file (:mod:`learner.checkpoint.export`) of the newest
checkpoint's policy version, observation layout and simulator, flown and evaluated like any
checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from learner.checkpoint.export import policy_state
from learner.checkpoint.files import CHECKPOINTS_DIR, CheckpointError, list_checkpoints
from learner.checkpoint.loading import read_checkpoint
from learner.checkpoint.saving import atomic_torch_save
from learner.network import ActorCritic


def _parameter_names(model_kwargs: dict[str, Any], path: Path) -> set[str]:
    try:
        network = ActorCritic.from_init_kwargs(model_kwargs)
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"checkpoint {path} describes no network this code can build: {exc}") from exc
    return {name for name, _ in network.named_parameters()}


def average_states(paths: Sequence[str | Path], note: str = "") -> dict[str, Any]:
    """Policy-only contents (as :func:`learner.checkpoint.export.policy_state` gives them)
    whose parameters are the mean of those of the checkpoints at ``paths``, the newest (the
    highest policy version) giving everything else; ``extra`` also records how many
    checkpoints were averaged and their policy versions and agent-steps.

    Every checkpoint must hold the same network, the same observation layout and the same
    simulator settings; a damaged one, or one that differs, raises :class:`CheckpointError`
    naming it (nothing is averaged past a mismatch)."""
    if not paths:
        raise CheckpointError("no checkpoints to average")
    states = [(Path(p), read_checkpoint(p, map_location="cpu")) for p in paths]
    states.sort(key=lambda ps: int(ps[1]["policy_version"]))
    newest_path, newest = states[-1]
    names = _parameter_names(newest["model_kwargs"], newest_path)
    sim = ((newest.get("extra") or {}).get("config") or {}).get("sim")
    for path, state in states[:-1]:
        for what, mine, theirs in (("network", state["model_kwargs"], newest["model_kwargs"]),
                                   ("observation layout", state.get("obs_layout"), newest.get("obs_layout")),
                                   ("simulator settings",
                                    ((state.get("extra") or {}).get("config") or {}).get("sim"), sim)):
            if mine != theirs:
                raise CheckpointError(f"checkpoint {path} holds a different {what} from {newest_path}: "
                                      "checkpoints of one run only can be averaged")
        if set(state["model"]) != set(newest["model"]):
            raise CheckpointError(f"checkpoint {path} holds other tensors than {newest_path}")
    averaged = dict(newest["model"])
    for name in sorted(names):
        stack = [state["model"][name] for _, state in states]
        if any(t.shape != stack[-1].shape for t in stack):
            raise CheckpointError(f"parameter {name} has different shapes in the checkpoints averaged")
        mean = torch.stack([t.double() for t in stack]).mean(0).to(stack[-1].dtype)
        if not bool(mean.isfinite().all()):
            raise CheckpointError(f"the mean of parameter {name} is not finite: a checkpoint holds NaN or inf")
        averaged[name] = mean
    out = policy_state({**newest, "model": averaged}, note)
    out["extra"]["averaged"] = {
        "checkpoints": len(states),
        "policy_versions": [int(state["policy_version"]) for _, state in states],
        "agent_steps": [(state.get("extra") or {}).get("agent_steps") for _, state in states],
    }
    return out


def run_checkpoints(directory: str | Path) -> tuple[Path, list[Path]]:
    """The folder that holds the numbered checkpoints of ``directory`` (a checkpoints folder or a
    run directory) and those checkpoints, oldest first; :class:`CheckpointError` when there are
    none."""
    directory = Path(directory)
    for folder in (directory, directory / CHECKPOINTS_DIR):
        found = list_checkpoints(folder)
        if found:
            return folder, found
    raise CheckpointError(f"no numbered checkpoints (ckpt_*.pt) in {directory} or {directory / CHECKPOINTS_DIR}")


def checkpoints_since(directory: str | Path, fraction: float) -> list[Path]:
    """The numbered checkpoints of ``directory`` (a checkpoints folder or a run directory)
    written at or after ``fraction`` (in [0, 1]) of the newest one's agent-steps, oldest first.

    A run that kept no numbered checkpoint, or one whose checkpoints record no agent-steps,
    raises :class:`CheckpointError`."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be a number in [0, 1], got {fraction!r}")
    _, found = run_checkpoints(directory)
    steps = []
    for path in found:
        value = (read_checkpoint(path).get("extra") or {}).get("agent_steps")
        if isinstance(value, bool) or not isinstance(value, int):
            raise CheckpointError(f"checkpoint {path} records no agent-steps (extra.agent_steps)")
        steps.append(value)
    cut = fraction * steps[-1]
    return [path for path, s in zip(found, steps, strict=True) if s >= cut]


LATE_FROM = 2 / 3
"""The fraction of a run's agent-steps from which :func:`late_checkpoints` picks by default: in
the league's recipes, the stretch after the last snapshot, when the pool no longer changes."""


def late_checkpoints(directory: str | Path, fraction: float | None = None,
                     last: int | None = None) -> tuple[Path, list[Path]]:
    """The checkpoints folder of ``directory`` (a checkpoints folder or a run directory) and its
    late numbered checkpoints, oldest first: the newest ``last`` when given, else those from
    ``fraction`` (default :data:`LATE_FROM`) of the run's agent-steps on. The commands'
    ``--from`` and ``--last`` (``pipeline.average``, ``pipeline.select``); a bad value raises
    :class:`ValueError` naming the flag."""
    if fraction is not None and last is not None:
        raise ValueError("give --from or --last, not both")
    if last is not None and last < 1:
        raise ValueError(f"--last must be at least 1, got {last}")
    fraction = LATE_FROM if fraction is None else fraction
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"--from must be in [0, 1], got {fraction}")
    folder, found = run_checkpoints(directory)
    return folder, (found[-last:] if last is not None else checkpoints_since(folder, fraction))


def average_checkpoints(paths: Sequence[str | Path], out: str | Path, note: str = "") -> Path:
    """Write the average of the checkpoints at ``paths`` (:func:`average_states`) to ``out`` as a
    policy-only file, atomically; returns ``out``."""
    return atomic_torch_save(average_states(paths, note), out)
