"""The range of every number a configuration holds, checked before any arithmetic uses it.

Each configuration dataclass declares a table of :class:`Bounds` by field name (``SIM_BOUNDS``
in ``sim.config``, ``PPO_BOUNDS`` in ``learner.ppo_config``, the pipeline's sections in
``pipeline.config.sections``); :func:`check_bounds` checks an instance against its table. A
value outside its range (``time_scale = 1e308``, ``update_epochs = 2**62``) is refused with one
line naming the field, the value and the range, so no later ``round`` or ``ceil`` overflows and
no loop runs for ever.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

SHOWN_CHARS = 60
"""A refused value is shown in its message up to this many characters (then ``...``)."""


def shown(value: object) -> str:
    """``repr(value)``, cut to :data:`SHOWN_CHARS` characters, for a one-line message."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int too long to print, a list nested too deep
        text = f"<a {type(value).__name__}>"
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _number(value: float) -> str:
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e16):
        return str(int(value))
    return f"{value:g}"


@dataclass(frozen=True)
class Bounds:
    """The closed range ``[low, high]`` of one field (``low_open``: ``(low, high]``);
    ``integer``: the field is an integer count, else a finite number."""

    low: float
    high: float
    low_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        """What the field takes, e.g. ``an integer in [1, 1000]`` or ``in (0, 10]`` (a number)."""
        kind = "an integer " if self.integer else ""
        return f"{kind}in {'(' if self.low_open else '['}{_number(self.low)}, {_number(self.high)}]"

    def admits(self, value: object) -> bool:
        """Whether ``value`` has the field's kind and lies in the range (a bool never does)."""
        if isinstance(value, bool):
            return False
        if self.integer:
            if not isinstance(value, int):
                return False
        elif not isinstance(value, (int, float)) or not finite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high

    def check(self, name: str, value: object, error: type[ValueError] = ValueError) -> None:
        """Raise ``error`` naming ``name``, the value and the range unless :meth:`admits`."""
        if not self.admits(value):
            raise error(f"{name} must be {self.describe()}, got {shown(value)}")


def count(low: int, high: int) -> Bounds:
    """An integer field's range ``[low, high]``."""
    return Bounds(low, high, integer=True)


def positive(high: float) -> Bounds:
    """A number field's range ``(0, high]``."""
    return Bounds(0.0, high, low_open=True)


def finite(value: float) -> bool:
    """Whether ``value`` is a finite number (an int too large for a float is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def check_bounds(instance: object, bounds: Mapping[str, Bounds], where: str = "",
                 error: type[ValueError] = ValueError) -> None:
    """Check every field of ``instance`` named in ``bounds`` (``None`` values are skipped: they
    mean "off"); a list or tuple has each item checked, named by its index. Field names in
    messages are prefixed with ``where.`` when ``where`` is given."""
    for name, bound in bounds.items():
        value = getattr(instance, name)
        label = f"{where}.{name}" if where else name
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                bound.check(f"{label}[{i}]", item, error)
        elif value is not None:
            bound.check(label, value, error)
