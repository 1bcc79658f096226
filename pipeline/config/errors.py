"""The one error every configuration check raises."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration name or value; the message names it, on one line (a line break in
    a value it quotes, a path's for one, becomes a space)."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))
