"""Plain data (a parsed TOML table, a checkpoint's or a replay's saved dict) into a typed dataclass.

:func:`coerce` is the one place that turns a nested dict into a configuration dataclass: the
pipeline's sections, ``sim.SimConfig`` (with its nested ``AeroParams``) and
``learner.PPOConfig`` all go through it. It refuses unknown keys by name and checks every value
against its field's annotation before the dataclass is built; range checks stay with each
dataclass (its ``__post_init__``, with ``core.bounds``) or its caller. A refusal names the
field, the value (cut to one line) and its kind: ``run.total_steps must be an integer, got '3'
(a string)``.

What each annotation takes (and what it gives):

- ``bool``: ``True`` or ``False`` only;
- ``int``: an integer, not a bool;
- ``float``: a finite integer or float, not a bool (given as a float);
- ``str``: a string that UTF-8 can write;
- ``list[X]`` and ``tuple[X, ...]``: a list or tuple of ``X`` (given as the annotation's kind);
  ``tuple[X, Y]``: exactly that many, each checked;
- ``dict[...]``: a dict (a copy);
- ``X | None``: ``None`` or an ``X``;
- a dataclass: an instance of it, or a dict coerced into it, the keys it leaves out taken from
  the field's default when the field has one;
- anything else (``Any``): as it is.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from core.bounds import finite, shown

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")

ITEM_NAMES: dict[object, str] = {bool: "booleans", int: "integers", float: "numbers", str: "strings"}
"""How a list's message names its items (``must be a list of strings``)."""
KIND_NAMES: dict[type, str] = {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
                               list: "a list", tuple: "a list", dict: "a table", type(None): "nothing"}
"""How a refusal names the kind of value it got (``got '3' (a string)``)."""


def coerce(
    cls: type[T],
    data: Mapping[str, object],
    *,
    where: str = "",
    base: T | None = None,
    unknown: str = "unknown {where} field(s): {names}",
    error: type[ValueError] = ValueError,
) -> T:
    """An instance of the dataclass ``cls`` from ``data``, each value checked against its
    field's annotation.

    ``where`` prefixes the field names in messages (``run`` gives ``run.sync must be true or
    false``; empty gives ``sync must be ...``). ``base`` is an instance the missing keys are taken
    from (default: the dataclass's own defaults). ``unknown`` is the message for keys that are no
    field, with ``{where}`` and ``{names}`` (the sorted unknown keys, comma separated); nested
    dataclasses use the default one. Every refusal raises ``error`` (a ``ValueError``); the
    dataclass's own checks raise what they raise.
    """
    known = {f.name for f in dataclasses.fields(cls)}
    extra = sorted(set(data) - known)
    if extra:
        raise error(unknown.format(where=where, names=", ".join(extra)))
    hints = _hints(cls)
    kwargs = {name: _value(_join(where, name), value, hints[name],
                           _default(cls, name) if _nests(hints[name]) else None, error)
              for name, value in data.items()}
    if base is not None:
        return dataclasses.replace(base, **kwargs)
    return cls(**kwargs)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, evaluated once per class (it compiles every string
    annotation on each call)."""
    return typing.get_type_hints(cls)


def _nests(hint: object) -> bool:
    """Whether ``hint`` is a dataclass (whose default completes a partial table)."""
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _default(cls: type, name: str) -> object:
    """The default of field ``name`` of ``cls`` (``None`` when it has none)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return None


def _value(where: str, value: object, hint: Any, default: object, error: type[ValueError]) -> Any:
    """``value`` checked against ``hint`` (and converted as the module says), or ``error``
    naming ``where``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
        origin = typing.get_origin(hint)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise error(f"{where} must be true or false, got {_got(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise error(f"{where} must be an integer, got {_got(value)}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value):
            return float(value)
        raise error(f"{where} must be a finite number, got {_got(value)}")
    if hint is str:
        if isinstance(value, str) and _text(value):
            return value
        raise error(f"{where} must be a string, got {_got(value)}")
    if origin in (list, tuple):
        return _sequence(where, value, hint, error)
    if origin is dict:
        if isinstance(value, dict):
            return dict(value)
        raise error(f"{where} must be a table, got {_got(value)}")
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if isinstance(value, Mapping):
            return coerce(hint, value, where=where, error=error,
                          base=default if isinstance(default, hint) else None)
        raise error(f"{where} must be a table, got {_got(value)}")
    return value


def _sequence(where: str, value: object, hint: Any, error: type[ValueError]) -> list[Any] | tuple[Any, ...]:
    """A list or tuple checked item by item against ``list[X]``, ``tuple[X, ...]`` or a
    fixed ``tuple[X, Y, ...]``; each item named by its index."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        items = list(args)
        if not isinstance(value, (list, tuple)) or len(value) != len(items):
            raise error(f"{where} must be a list of {len(items)} {_item_name(items[0])}, got {_got(value)}")
    else:
        item = args[0] if args else Any
        if not isinstance(value, (list, tuple)):
            raise error(f"{where} must be a list of {_item_name(item)}, got {_got(value)}")
        items = [item] * len(value)
    checked = [_value(f"{where}[{i}]", v, h, None, error) for i, (v, h) in enumerate(zip(value, items, strict=True))]
    return tuple(checked) if origin is tuple else checked


def _item_name(hint: object) -> str:
    return ITEM_NAMES.get(hint, "values")


def _got(value: object) -> str:
    """The refused value for a message: shown, with its kind where that is not plain from it
    (``'3' (a string)``, ``1.5 (a float)``)."""
    kind = KIND_NAMES.get(type(value), f"a {type(value).__name__}")
    return f"{shown(value)} ({kind})"


def _text(value: str) -> bool:
    """Whether ``value`` can be written as UTF-8 (a command-line argument of undecodable bytes
    holds lone surrogates, which no file can)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
