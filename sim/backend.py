"""Which backend steps a :class:`sim.batched.BatchedSim`: the torch tensor ops, the native
C++ kernel of sim/native/ or the fused Triton kernel of sim/fused.py, from the requested one, the
device and what the kernel supports."""

from __future__ import annotations

import os
import warnings

import torch

from sim.config import SimConfig
from sim.native import load as load_native
from sim.native import load_error as native_load_error
from sim.native import supports as native_supports

BACKENDS = ("auto", "torch", "native", "triton")
"""Values of ``BatchedSim(backend=...)``."""

_warned_fallback = False


def resolve_backend(backend: str, device: torch.device, config: SimConfig) -> str:
    """``"torch"``, ``"native"`` or ``"triton"`` for a requested backend (see
    :class:`sim.batched.BatchedSim`). ``auto`` never picks ``triton``: it is asked for by name."""
    global _warned_fallback
    if backend == "torch":
        return "torch"
    if backend == "triton":
        from sim.fused import unsupported

        reason = unsupported(config, device)
        if reason is not None:
            raise ValueError(f"backend='triton' cannot run here: {reason}")
        return "triton"
    if backend == "native":
        if device.type != "cpu":
            raise ValueError(f"backend='native' runs on the CPU only, not on {device}")
        reason = native_supports(config)
        if reason is not None:
            raise ValueError(f"backend='native' cannot run this config: {reason}")
        if not load_native():
            raise RuntimeError(f"backend='native': the kernel could not be built or loaded: {native_load_error()}")
        return "native"
    if device.type != "cpu" or native_supports(config) is not None:
        return "torch"
    if os.environ.get("MIDRANGE_SIM_BACKEND", "").strip().lower() == "torch":
        return "torch"
    if load_native():
        return "native"
    if not _warned_fallback:
        _warned_fallback = True
        warnings.warn(
            f"sim: the native CPU kernel is unavailable ({native_load_error()}); using the torch "
            "path", RuntimeWarning, stacklevel=3,
        )
    return "torch"
