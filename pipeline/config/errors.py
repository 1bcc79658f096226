"""The one error every configuration check raises."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration name or value; the message names it."""
