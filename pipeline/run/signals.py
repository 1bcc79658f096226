"""The launcher's signal handlers: SIGTERM during the start (unwinds as Ctrl-C does), the first
SIGINT/SIGTERM of a run (a graceful stop, on the event loop) and a second one (exit 130 at once).
``pipeline/launch.py`` installs them; ``docs/reliability.md``, "Signals", says what they promise."""

from __future__ import annotations

import os
import signal
import sys
import time

from actors.workers.env_worker_handle import unlink_owned_blocks
from pipeline.run.loops import Run

SAME_SIGNAL_S = 0.5
"""A SIGTERM this soon after the first signal is the same stop, not a second one: ``timeout``
signals the launcher and then its whole process group, the launcher included. (Two Ctrl-C,
however quick, are two.)"""

_first_signal_at: float | None = None


def _repeated(signum: int) -> bool:
    """Whether this signal repeats the first (a SIGTERM within :data:`SAME_SIGNAL_S`); the
    first is noted."""
    global _first_signal_at
    now = time.monotonic()
    if _first_signal_at is None:
        _first_signal_at = now
        return False
    return signum == signal.SIGTERM and now - _first_signal_at < SAME_SIGNAL_S


class StartInterrupted(KeyboardInterrupt):
    """SIGTERM before the run loop started (``signum``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


def interrupt_start(signum: int, frame: object) -> None:
    """Until the run loop takes SIGTERM over: unwind the start (``main`` reports it) on the
    first signal; ignore the others (the unwinding is under way)."""
    first = _first_signal_at is None
    _repeated(signum)  # notes the first
    if first:
        raise StartInterrupted(signum)


def on_signal(the_run: Run, sig: int) -> None:
    """The first signal of a run stops it gracefully; a second exits at once."""
    if _repeated(sig):
        return
    if the_run.budget.stopped:
        exit_now(sig, None)
    the_run.request_stop(f"received {signal.Signals(sig).name}")


def exit_now(signum: int, frame: object) -> None:
    """Exit 130 at once, without the run's teardown (a repeat of the first signal aside)."""
    if _repeated(signum):
        return
    # Saved files are written atomically, so leaving mid-write keeps the last checkpoint loadable.
    # The env workers' shared blocks are unlinked here (no teardown runs); the children see
    # this process end and exit by themselves (actors.workers.supervision.follow_parent).
    unlink_owned_blocks()
    sys.stderr.write(f"{signal.Signals(signum).name}: exiting now\n")
    sys.stderr.flush()
    os._exit(130)
