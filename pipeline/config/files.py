"""Config files and command-line overrides as plain data: TOML in and out, ``--set key=value``.

The data these produce is what :func:`pipeline.config.resolve` turns into the typed tree.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pipeline.config.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


def load_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML config file; a missing, unreadable or malformed file raises ConfigError
    naming it."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--config: no such file: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"--config: {path} is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config: {path} is not valid TOML: {exc}") from None


def parse_value(text: str) -> Any:
    """A ``--set`` value: TOML syntax (``3``, ``1.5``, ``true``, ``"x"``) or a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_override(data: dict[str, Any], key: str, value: Any) -> None:
    """Set ``section.field`` (``sim.fighter.lift_to_drag`` nests) in a nested dict in place."""
    parts = key.split(".")
    if len(parts) < 2 or not all(parts):
        raise ConfigError(f"--set key must look like section.field, got {key!r}")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {part} is not a table")
        node = child
    node[parts[-1]] = value


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ConfigError(f"cannot write {value!r} to TOML")


def to_toml(data: dict[str, Any]) -> str:
    """Write a nested dict of scalars / lists / tables as TOML (None values are left out)."""
    lines: list[str] = []

    def table(prefix: str, node: dict[str, Any]) -> None:
        scalars = {k: v for k, v in node.items() if not isinstance(v, dict) and v is not None}
        subs = {k: v for k, v in node.items() if isinstance(v, dict)}
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{k} = {_toml_value(v)}" for k, v in scalars.items())
        lines.append("")
        for k, v in subs.items():
            table(f"{prefix}.{k}" if prefix else k, v)

    table("", data)
    return "\n".join(lines).lstrip("\n")
