"""Devices: which one a run takes, whether it is CUDA, and how many CPU cores it may use."""

from __future__ import annotations

import os

import torch

from pipeline.config.errors import ConfigError

CUDA_STREAMS_PER_POOL = 32
"""Streams in PyTorch's per-device pool of each priority (``torch.cuda.Stream()`` takes the
next one, round robin)."""


def pick_device(requested: str) -> str:
    """``auto`` → ``cuda:0`` when present else ``cpu``; a CUDA device must exist and is indexed."""
    if requested == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"run.device is {requested!r} but no CUDA device is available")
        index = int(requested[5:]) if ":" in requested else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"run.device is {requested!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
        return f"cuda:{index}"
    return requested


def device_is_cuda(device: str) -> bool:
    """Whether ``device`` (``cpu``, ``cuda``, ``cuda:N``) names a CUDA device."""
    return device.startswith("cuda")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
