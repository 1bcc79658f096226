"""Checks of an evaluation's device and output paths, made before the first match so that bad
input is one line rather than a failure minutes later."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from core.files import temporary_path


def check_device(spec: str) -> str:
    """``spec`` if this machine has that device (``cpu``, ``cuda``, ``cuda:N``); a one-line
    ``ValueError`` otherwise, before anything is built on it."""
    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError, TypeError):
        raise ValueError(f"--device {spec!r} is not a device (cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device {spec}: CUDA is not available on this machine (torch {torch.__version__})")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"--device {spec}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise ValueError(f"--device {spec}: the simulator runs on cpu or cuda[:N] only")
    return spec


def check_writable(path: str | Path, flag: str = "--json") -> None:
    """Refuse, before an evaluation that may take minutes, an output path that cannot be
    written: a directory, a missing folder, a folder where files cannot be created."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        state = "is not a directory" if parent.exists() else "does not exist"
        raise ValueError(f"{flag} {path}: the folder {parent} {state}")
    probe = temporary_path(path)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot write in {parent}: "
                         f"{(exc.strerror or str(exc)).lower()}") from None


def prepare_record_dir(path: str | Path) -> None:
    """Create the ``--record`` folder (parents included) and check it can be written."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--record {path} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--record {path}: cannot create it: {(exc.strerror or str(exc)).lower()}") from None
    check_writable(path / "probe.replay", "--record")
