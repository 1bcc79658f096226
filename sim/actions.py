"""Action validation and decoding at the simulator's boundary.

Shape, dtype and device errors are raised at once (they are known on the host). Value errors
(NaN, an out-of-range discrete index) depend on the data: on the CPU they are checked at once;
on CUDA they are folded into a device-side flag with no host sync, and
:meth:`ActionChecker.raise_if_bad` (called by ``BatchedSim.check_errors()``, which the pipeline
calls at every chunk boundary) reads the flag and raises. Bad values are replaced by safe ones
on the device so the step itself stays well defined until the check.
"""

from __future__ import annotations

import numpy as np
import torch

RUDDER_LEVELS = (-1.0, 0.0, 1.0)
THROTTLE_LEVELS = (0.0, 0.5, 1.0)
DISCRETE_NVEC = (3, 3, 2)
"""Sizes of the discrete action components: rudder, throttle, fire."""
ACTION_COMPONENTS = ("rudder", "throttle", "fire")


def check_action_tensor(
    actions: torch.Tensor, num_envs: int, device: torch.device, mode: str, sides: int = 2
) -> None:
    """Raise ``ValueError`` if ``actions`` has the wrong type, shape, dtype or device."""
    if not isinstance(actions, torch.Tensor):
        raise ValueError(f"actions must be a torch.Tensor, got {type(actions).__name__}")
    expected = (num_envs, sides, 3) if sides > 1 else (num_envs, 3)
    if tuple(actions.shape) != expected:
        raise ValueError(f"actions must have shape {expected}, got {tuple(actions.shape)}")
    if actions.device != device:
        raise ValueError(f"actions must be on device {device}, got {actions.device}")
    if mode == "discrete":
        if actions.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            raise ValueError(
                f"discrete actions must be an integer tensor (int64 indices), got {actions.dtype}"
            )
    elif not actions.is_floating_point():
        raise ValueError(f"continuous actions must be a floating-point tensor, got {actions.dtype}")


class ActionChecker:
    """Validates action values; immediate on CPU, a sticky device flag on CUDA."""

    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.enabled = enabled
        self.deferred = device.type != "cpu"
        self._bad = torch.zeros((), dtype=torch.bool, device=device)
        self._kind = "discrete"

    def discrete(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Decode int indices ``[..., 3]`` into rudder, throttle and fire request."""
        rudder_i, throttle_i, fire_i = actions[..., 0], actions[..., 1], actions[..., 2]
        if self.enabled:
            bad = (
                (rudder_i < 0) | (rudder_i > 2) | (throttle_i < 0) | (throttle_i > 2)
                | (fire_i < 0) | (fire_i > 1)
            ).any()
            self._flag(bad, "discrete")
        rudder_i = rudder_i.clamp(0, 2)
        throttle_i = throttle_i.clamp(0, 2)
        return rudder_i - 1, throttle_i * 0.5, fire_i > 0

    def continuous(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Clip float ``[..., 3]`` into rudder [−1, 1], throttle [0, 1] and fire (> 0.5)."""
        if self.enabled:
            self._flag(torch.isnan(actions).any(), "continuous")
        clean = torch.nan_to_num(actions, nan=0.0)
        rudder = clean[..., 0].clamp(-1.0, 1.0)
        throttle = clean[..., 1].clamp(0.0, 1.0)
        return rudder, throttle, clean[..., 2] > 0.5

    def _flag(self, bad: torch.Tensor, kind: str) -> None:
        if self.deferred:
            self._bad |= bad
            self._kind = kind
        elif bool(bad):
            raise ValueError(_message(kind))

    def raise_if_bad(self) -> None:
        """Read the device-side flag (one host sync) and raise if any bad action was seen."""
        if self.deferred and bool(self._bad):
            self._bad.zero_()
            raise ValueError(_message(self._kind) + " (detected at the last check_errors())")


def _message(kind: str) -> str:
    if kind == "discrete":
        return (
            "discrete actions out of range: rudder and throttle indices must be in {0, 1, 2} "
            "and fire in {0, 1}"
        )
    return "continuous actions contain NaN"


def action_tensor(
    action: object, mode: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
    who: str = "action",
) -> torch.Tensor:
    """One side's actions from numpy-like input (a Python env's ``step`` argument): int64
    indices in ``"discrete"`` mode, where float indices are refused rather than truncated, or
    ``dtype`` values; a wrong shape or kind is a ``ValueError`` naming ``who``. Values are
    checked by the simulator's step."""
    arr = np.asarray(action)
    if arr.shape != shape:
        raise ValueError(f"{who} must have shape {shape}, got {arr.shape}")
    if mode == "discrete":
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"discrete {who} must be integers, got dtype {arr.dtype}")
        return torch.as_tensor(arr.astype(np.int64), device=device)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"continuous {who} must be numbers, got dtype {arr.dtype}")
    return torch.as_tensor(arr.astype(np.float64), device=device).to(dtype)
