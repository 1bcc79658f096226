"""Config files and command-line overrides as plain data: TOML in and out, ``--set key=value``.

The data these produce is what :func:`pipeline.config.resolve` turns into the typed tree.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

from core.bounds import shown
from pipeline.config.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


MAX_CONFIG_BYTES = 1 << 20
"""The largest config file ``--config`` reads (a run's own ``config.toml`` is a few KiB)."""
MAX_VALUE_CHARS = 1 << 16
"""The longest ``--set`` value (or ``--env-kwargs`` text) parsed."""
MAX_NESTING = 32
"""The deepest nesting of lists and tables a value or config file may have."""


def load_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML config file; a missing, unreadable, malformed or too large file, or one that
    is no regular file (``/dev/zero``, a FIFO), raises ConfigError naming it. At most
    :data:`MAX_CONFIG_BYTES` are read."""
    path = Path(path)
    try:
        # Non-blocking: opening a FIFO must not wait for a writer (the check below refuses it).
        with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(path)
            if not stat.S_ISREG(mode):
                raise ConfigError(f"--config: {path} is not a regular file")
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"--config: no such file: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"--config: {path} is a directory, not a TOML file") from None
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"--config: {path} is larger than {MAX_CONFIG_BYTES >> 20} MiB; a config "
                          "file is a few KiB")
    try:
        return parse_toml(raw.decode("utf-8"))
    except (ConfigError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config: {path} is not valid TOML: {exc}") from None


def parse_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads`` with the nesting bounded by :data:`MAX_NESTING` (deeper raises
    ConfigError before the parser recurses into it)."""
    depth = nesting(text) if text.count("[") + text.count("{") > MAX_NESTING else 0
    if depth > MAX_NESTING:
        raise ConfigError(f"lists and tables nested {depth} deep (at most {MAX_NESTING})")
    try:
        return tomllib.loads(text)
    except RecursionError:  # nesting the count above missed (brackets inside multi-line strings)
        raise ConfigError(f"lists and tables nested too deep (at most {MAX_NESTING})") from None


def nesting(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in TOML or JSON text, quoted strings and comments
    left out (an upper bound: a table header ``[a]`` counts as one level)."""
    depth = deepest = 0
    quote = ""
    escaped = comment = False
    for ch in text:
        if comment:
            comment = ch != "\n"
        elif quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote == '"':
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            comment = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return deepest


def parse_value(text: str) -> Any:
    """A ``--set`` value: TOML syntax (``3``, ``1.5``, ``true``, ``"x"``) or a bare string; one
    longer than :data:`MAX_VALUE_CHARS` or nested deeper than :data:`MAX_NESTING` raises
    ConfigError."""
    if len(text) > MAX_VALUE_CHARS:
        raise ConfigError(f"a value of {len(text)} characters (at most {MAX_VALUE_CHARS})")
    try:
        return parse_toml(f"v = {text}")["v"]
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


def toml_value(value: Any) -> str:
    """``value`` (a bool, number, string or list of them) as TOML writes it, strings escaped:
    for ``config.toml`` and for ``--set KEY=VALUE``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_toml_char(ch) for ch in value) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise ConfigError(f"cannot write {shown(value)} to TOML")


def _toml_char(ch: str) -> str:
    """One character of a TOML basic string: quote, backslash and control characters escaped."""
    if ch in '"\\':
        return "\\" + ch
    if ord(ch) < 0x20 or ord(ch) == 0x7F:
        return f"\\u{ord(ch):04X}"
    return ch


def _toml_key(key: str) -> str:
    """A key as TOML writes it: bare when it is letters, digits, ``_`` and ``-``, else quoted."""
    bare = key and all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in key)
    return key if bare else toml_value(key)


def check_writable(where: str, value: dict[str, Any]) -> None:
    """Refuse a table that ``config.toml`` could not hold as it is (a ``null``, a table inside a
    list, a key TOML cannot write bare): written and read back, it must be equal."""
    try:
        again = tomllib.loads(to_toml({"t": value})).get("t", {})
    except (ConfigError, tomllib.TOMLDecodeError, RecursionError):
        again = None
    if again != value:
        raise ConfigError(f"{where} must be a table of strings, numbers, booleans, lists and tables "
                          f"that config.toml can hold, got {shown(value)}")


def to_toml(data: dict[str, Any]) -> str:
    """Write a nested dict of scalars / lists / tables as TOML (None values are left out)."""
    lines: list[str] = []

    def table(prefix: str, node: dict[str, Any]) -> None:
        scalars = {k: v for k, v in node.items() if not isinstance(v, dict) and v is not None}
        subs = {k: v for k, v in node.items() if isinstance(v, dict)}
        if prefix:
            lines.append(f"[{prefix}]")
        lines.extend(f"{_toml_key(k)} = {toml_value(v)}" for k, v in scalars.items())
        lines.append("")
        for k, v in subs.items():
            table(f"{prefix}.{_toml_key(k)}" if prefix else _toml_key(k), v)

    table("", data)
    return "\n".join(lines).lstrip("\n")
