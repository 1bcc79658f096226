"""The lines a drawing command prints (``wrote OUT (...)``, a replay's summary)."""

from __future__ import annotations


def say(text: str) -> None:
    """Print ``text`` and flush; a standard output that cannot be written (a full disk,
    ``> /dev/full``) raises ``OSError`` naming it, as a failed write of any file does."""
    try:
        print(text, flush=True)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), "standard output") from None
