"""One spelling per device: ``cuda`` means the current CUDA device, with its index.

Tensors always report an indexed CUDA device (``cuda:0``), so an object that stored a bare
``torch.device("cuda")`` would never compare equal to its own tensors' device; code that checks
"is this already on my device?" would then copy on every call (a host sync on the hot path).
"""

from __future__ import annotations

import torch


def canonical_device(device: str | torch.device) -> torch.device:
    """``torch.device(device)``, with the current device's index filled in for a bare CUDA."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device
