"""How the command-line tools end: bad input is one line on stderr and exit status 2, a failed
write one line and status 1, never a traceback (``pipeline.evaluate``, ``pipeline.replay``,
``pipeline.plot``); :class:`CommandParser` gives every command's argument errors the same one
line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn


def squeezed(exc: BaseException | str, limit: int | None = None) -> str:
    """An exception's message (or a text) on one line (every run of whitespace one space), at most
    ``limit`` characters if given: for a message that quotes another library's multi-line error."""
    return " ".join(str(exc).split())[:limit]


class CommandParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose errors (an unknown option, a missing or malformed
    value) are one line on stderr, ``error: MESSAGE (python -m TOOL --help lists the options)``,
    and exit status 2, instead of the usage block argparse prints first."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {' '.join(message.split())} ({self.prog} --help lists the options)", file=sys.stderr)
        raise SystemExit(2)


def run_command(main: Callable[[list[str] | None], Any], argv: Sequence[str] | None,
                bad_input: tuple[type[BaseException], ...] = (ValueError,)) -> None:
    """Call ``main(argv)``; ``bad_input`` exceptions exit 2, an ``OSError`` (a write that
    failed) exits 1, each with its message on one line."""
    try:
        main(None if argv is None else list(argv))
    except bad_input as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as exc:
        print(f"error: cannot write {exc.filename}: {(exc.strerror or str(exc)).lower()}", file=sys.stderr)
        raise SystemExit(1) from None
