"""The files a run appends to (``run.log``, ``progress.csv``, TensorBoard events) on a disk that
may fill up.

Each append is one whole record or nothing: :func:`append_whole` cuts a failed or short write
back off, so a full disk never leaves half a line, and raises ``OSError`` naming the file. The
run log (:class:`RunLogHandler`) cannot raise from inside a logging call made on any thread, so
it keeps its first failure (:attr:`RunLogHandler.failure`) for the run to stop on at its next
report, and writes nothing more.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from pathlib import Path

RUN_LOG = "run.log"


def append_whole(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` (created if missing) in one write, or not at all: a failed or
    short write is truncated away again and raises ``OSError`` naming ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            if written != len(data):  # a regular file writes short only when the disk is full
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            with contextlib.suppress(OSError):  # not a regular file (a device), or read-only
                os.ftruncate(fd, size)
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    finally:
        os.close(fd)


class RunLogHandler(logging.Handler):
    """Appends each record to ``path`` as whole lines; the first failed append is kept in
    :attr:`failure` (an ``OSError`` naming the file) and ends the writing."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.failure: OSError | None = None
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))  # it can be opened

    def emit(self, record: logging.LogRecord) -> None:
        if self.failure is not None:
            return
        try:
            append_whole(self.path, (self.format(record) + "\n").encode())
        except OSError as exc:
            self.failure = exc


def make_logger(run_dir: Path, name: str = RUN_LOG) -> logging.Logger:
    """A logger writing to ``run_dir/name`` (one per run directory and name: ``run.log``, or
    ``run.rankN.log`` for rank N of a torchrun job)."""
    log = logging.getLogger(f"pipeline.run.{run_dir.resolve()}.{name}")
    log.setLevel(logging.INFO)
    log.propagate = False
    for h in list(log.handlers):
        log.removeHandler(h)
        h.close()
    handler = RunLogHandler(run_dir / name)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    return log


def log_failure(log: logging.Logger) -> OSError | None:
    """The first failed write of ``log``'s run log, or None."""
    for handler in log.handlers:
        if isinstance(handler, RunLogHandler) and handler.failure is not None:
            return handler.failure
    return None


FULL_DISK = os.strerror(errno.ENOSPC).lower()


def unsaid_log_failure(log: logging.Logger, reported: OSError | None, error: str) -> OSError | None:
    """The run log's first failed write if no line has said it yet, else None. Said already:
    when a failed write of the run's files stopped it (``reported``, the first such, which
    may be this one), or when it is a full disk and ``error``, the line the run printed, already
    says the disk is full. A full disk is one line, naming whichever file it refused first; the
    log's writes after that (another thread's line, the summary's) fail on the same disk and
    say nothing new."""
    failure = log_failure(log)
    if failure is None or reported is not None:
        return None
    if failure.errno == errno.ENOSPC and error.startswith(FULL_DISK):
        return None
    return failure
