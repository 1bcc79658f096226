"""Validation of the values hot loops hand to the facade: a bad one raises ``ValueError``
naming the argument, at the call that brought it in."""

from __future__ import annotations

import math
import operator
import re
from typing import Any

import torch

# Prometheus label values may be any UTF-8; refuse only what would garble a dashboard legend
# (empty, control characters, very long: an opponent may be a checkpoint path).
_LABEL_VALUE = re.compile(r"[^\x00-\x1f\x7f]{1,256}")


def check_int(name: str, value: Any, minimum: int = 0) -> int:
    """``value`` as an int >= ``minimum`` (Python or NumPy integer; never a tensor)."""
    # operator.index accepts Python and NumPy integers; tensors are refused because reading
    # one would be a host sync.
    if isinstance(value, (bool, torch.Tensor)):
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_label(name: str, value: Any) -> str:
    """``value`` as a Prometheus label value: 1 to 256 characters, no control characters."""
    if not isinstance(value, str) or not _LABEL_VALUE.fullmatch(value):
        raise ValueError(
            f"{name} must be a label: a string of 1 to 256 characters without control characters, "
            f"got {value!r}"
        )
    return value


def check_seconds(name: str, value: Any) -> float:
    """``value`` as a finite, non-negative number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number of seconds, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)
