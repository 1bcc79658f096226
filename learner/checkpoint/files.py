"""Checkpoint files: their names, where they are found, and the error a bad one raises."""

from __future__ import annotations

import re
from pathlib import Path

FORMAT_VERSION = 1
LATEST_NAME = "latest.pt"
CHECKPOINTS_DIR = "checkpoints"
_NAME_RE = re.compile(r"^ckpt_(\d{9,})\.pt$")


class CheckpointError(ValueError):
    """A checkpoint is missing, truncated, corrupt or incompatible, or could not be written; the
    message is one line naming the file. A ``ValueError``, so command lines report it as bad
    input (exit status 2)."""


class NonFiniteStateError(CheckpointError):
    """The learner holds NaN or inf; saving it would replace a good checkpoint by a broken one.
    A :class:`CheckpointError` (so a ``ValueError``): whoever reports a failed save reports it."""


def checkpoint_name(policy_version: int) -> str:
    """File name of the checkpoint of ``policy_version``."""
    return f"ckpt_{policy_version:09d}.pt"


def numbered_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(version, path) of the versioned checkpoints in ``directory``, lowest version first."""
    if not directory.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME_RE.match(p.name)))


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Versioned checkpoints in ``directory``, oldest first (``latest.pt`` excluded)."""
    return [p for _, p in numbered_checkpoints(Path(directory))]


def resolve_checkpoint_path(path: str | Path) -> Path:
    """A checkpoint file, a checkpoints folder (``DIR/latest.pt``) or a run directory
    (``DIR/checkpoints/latest.pt``) → the checkpoint file; :class:`CheckpointError` naming
    what was looked for otherwise."""
    p = Path(path)
    if p.is_dir():
        candidates = (p / LATEST_NAME, p / CHECKPOINTS_DIR / LATEST_NAME)
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        numbered = list_checkpoints(p) or list_checkpoints(p / CHECKPOINTS_DIR)
        hint = f"; it holds {numbered[-1]}, which can be named instead" if numbered else ""
        raise CheckpointError(f"no checkpoint in {p} (looked for {candidates[0]} and "
                              f"{candidates[1]}){hint}")
    if p.is_file():
        return p
    if p.exists():
        raise CheckpointError(f"checkpoint {p} is not a regular file")
    raise CheckpointError(f"no checkpoint at {p} (no such file or directory)")
