"""Policy-only files: a checkpoint's policy network, its observation layout and the simulator it
was trained on, without the optimizer state, RNG states and training config that resuming needs.

A policy-only file is a torch file of the checkpoint format with ``kind`` set to
:data:`learner.checkpoint.loading.POLICY_ONLY`: ``load_policy`` (and everything that flies or
evaluates a checkpoint) reads it as it reads a checkpoint, with the same archive, CRC and
observation-layout checks; ``load_checkpoint`` refuses to resume from it. The packaged
champions (``agents/champions``) are such files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from learner.checkpoint.files import FORMAT_VERSION
from learner.checkpoint.loading import POLICY_ONLY, read_checkpoint
from learner.checkpoint.saving import atomic_torch_save


def policy_state(checkpoint: dict[str, Any], note: str = "") -> dict[str, Any]:
    """The policy-only contents of a checkpoint's contents (as :func:`read_checkpoint` returns
    them): the network's weights (float32 tensors as float32; normalization counters as saved),
    how to build it, its observation layout, the policy version, and in ``extra`` the agent-steps
    it was trained for, the simulator section of its run's config and ``note``."""
    extra = checkpoint.get("extra") or {}
    sim = (extra.get("config") or {}).get("sim")
    return {
        "format_version": FORMAT_VERSION,
        "kind": POLICY_ONLY,
        "policy_version": int(checkpoint["policy_version"]),
        "model": {k: v.detach().clone().contiguous() for k, v in checkpoint["model"].items()},
        "model_kwargs": checkpoint["model_kwargs"],
        "obs_layout": checkpoint.get("obs_layout"),
        "extra": {
            "agent_steps": extra.get("agent_steps"),
            "config": {"sim": sim} if isinstance(sim, dict) else {},
            "note": note,
        },
    }


def export_policy(source: str | Path, out: str | Path, note: str = "") -> Path:
    """Write the policy of the checkpoint at ``source`` (a file, a checkpoints folder or a run
    directory) to ``out`` as a policy-only file, atomically; ``note`` (e.g. the command that
    trained it) is kept in its ``extra``. A damaged source raises ``CheckpointError``."""
    state = read_checkpoint(source, map_location=torch.device("cpu"))
    return atomic_torch_save(policy_state(state, note), out)
