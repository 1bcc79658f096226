"""Plug-in loading: ``package.module:Name`` specs, as agents and rewards take them on the command
line. Here on floor 0 so that every registry can share it without importing another registry."""

from __future__ import annotations

import importlib
from typing import Any


def load_object(path: str) -> Any:
    """Import ``package.module:Name`` and return ``Name`` (dotted names reach attributes of
    attributes), with a ``ValueError`` naming the spec when it fails."""
    if not isinstance(path, str):
        raise ValueError(f"import path must be a string 'package.module:Name', got {path!r}")
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"import path must look like 'package.module:Name', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r} from {path!r}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj
