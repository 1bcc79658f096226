"""Run directories are owned: one run at a time holds a directory, and a finished run's directory
is never silently reused.

:func:`claim_run_dir` is the first thing a run writes, after every input was validated. It takes
an exclusive lock file (pid, host, start time; a lock whose process is dead is taken over with a
message), refuses a non-empty directory unless the run resumes that very directory, sweeps
temporary files a killed writer left, and writes the resolved ``config.toml`` atomically.
:meth:`RunDir.release` removes the lock, and, for a run that failed before its first checkpoint,
the directory it created.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from core.files import write_text_atomic
from learner.checkpoint import sweep_stale_tmp
from pipeline.config import ConfigError

LOCK_NAME = ".lock"


@dataclass
class RunDir:
    """A claimed run directory."""

    path: Path
    created: bool
    """The run created the directory (so a failed start may remove it)."""
    messages: list[str]
    """What claiming it found worth saying (a stale lock taken over, stale files swept)."""

    def release(self, keep: bool = True) -> None:
        """Drop the lock; with ``keep=False`` remove a directory this run created and left
        without a checkpoint (a failed start leaves nothing behind)."""
        lock = self.path / LOCK_NAME
        try:
            if json.loads(lock.read_text()).get("pid") == os.getpid():
                lock.unlink()
        except (OSError, ValueError):
            pass
        if not keep and self.created and not any((self.path / "checkpoints").glob("*.pt")):
            shutil.rmtree(self.path, ignore_errors=True)


def default_run_dir() -> Path:
    """``runs/<UTC timestamp>``."""
    return Path("runs") / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def run_dir_of(checkpoint_or_dir: str | Path) -> Path | None:
    """The run directory a ``--resume`` path belongs to (a run directory, its ``checkpoints``
    folder or a checkpoint inside it), or None when it is a bare checkpoint elsewhere."""
    p = Path(checkpoint_or_dir)
    for candidate in (p, p.parent, p.parent.parent):
        if (candidate / "config.toml").is_file() and (candidate / "checkpoints").is_dir():
            return candidate
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_lock(lock: Path) -> tuple[dict[str, object] | None, str]:
    """The holder a lock file names (its ``pid``, ``host``, ``started``), or None and why not:
    empty (being written this instant, or left so), unreadable, or not such a record."""
    try:
        text = lock.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, f"unreadable ({reason.lower()})"
    if not text.strip():
        return None, "empty"
    try:
        holder = json.loads(text)
    except ValueError:
        holder = None
    if not isinstance(holder, dict) or not isinstance(holder.get("pid"), int):
        return None, f"garbage (not the pid, host and start time a run writes: {text[:40]!r})"
    return holder, ""


def _take_lock(path: Path, messages: list[str]) -> None:
    lock = path / LOCK_NAME
    me = {"pid": os.getpid(), "host": socket.gethostname(),
          "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    why = ""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder, why = _read_lock(lock)
            if holder is None:
                if why != "empty":
                    break
                time.sleep(0.2)  # a lock being written this instant: look again once
                if _read_lock(lock)[1] == "empty":
                    lock.unlink(missing_ok=True)
                continue
            pid, host = holder.get("pid"), holder.get("host")
            if host == me["host"] and isinstance(pid, int) and not _alive(pid):
                messages.append(f"took over the lock of pid {pid} (started {holder.get('started')}), "
                                "which is no longer running")
                lock.unlink(missing_ok=True)
                continue
            raise ConfigError(
                f"run directory {path} is in use by pid {pid} on {host} since "
                f"{holder.get('started')} (remove {lock} only if that run is gone)") from None
        with os.fdopen(fd, "w") as fh:
            json.dump(me, fh)
        return
    raise ConfigError(f"run directory {path}: could not take the lock {lock}: it is {why}; remove it "
                      "if no run is using this directory")


RANK_LOG = re.compile(r"run\.rank[1-9][0-9]*\.log")
"""The log of a rank other than 0 (:func:`pipeline.run.outputs.make_logger`)."""


def _contents(path: Path) -> list[str]:
    """The names in ``path`` but a lock, temporary files and a ``checkpoints`` folder holding
    nothing else (what a run killed while claiming the directory leaves), and the logs another
    rank of a torchrun job kept there (``run.rank1.log``, ...: on a machine that ran rank 1 of
    an earlier job, the folder of the same name holds only that)."""
    names = []
    for p in sorted(path.iterdir()):
        if p.name == LOCK_NAME or p.name.endswith(".tmp") or RANK_LOG.fullmatch(p.name):
            continue
        if p.name == "checkpoints" and p.is_dir() and all(q.name.endswith(".tmp") for q in p.iterdir()):
            continue
        names.append(p.name)
    return names


def claim_run_dir(path: Path, config_text: str, resuming_here: bool) -> RunDir:
    """Lock ``path`` for this run and write its config (see the module docstring).

    ``resuming_here``: the run resumes a checkpoint of this directory, which may then hold
    files; any other run needs a missing or empty directory.
    """
    if path.exists() and not path.is_dir():
        raise ConfigError(f"run.run_dir {path} is a file, not a directory")
    created = not path.exists()
    held = [] if created or resuming_here else _contents(path)
    if "config.toml" in held or "checkpoints" in held:
        raise ConfigError(
            f"run directory {path} is not empty (it holds an earlier run); continue it with "
            f"--resume {path}, or choose a new --run-dir")
    if held:
        shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
        raise ConfigError(
            f"run directory {path} is not empty and is not a run directory (it holds {len(held)} "
            f"file(s) or folder(s): {shown}); choose a new or empty --run-dir")
    try:
        (path / "checkpoints").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"run.run_dir {path}: cannot create it: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"run.run_dir {path} is not writable")
    messages: list[str] = []
    _take_lock(path, messages)
    run_dir = RunDir(path, created, messages)
    try:
        swept = sweep_stale_tmp(path) + sweep_stale_tmp(path / "checkpoints")
        if swept:
            messages.append(f"removed {len(swept)} temporary file(s) a killed run left: "
                            + ", ".join(p.name for p in swept))
        _write_atomically(path / "config.toml", config_text)
    except BaseException:
        run_dir.release(keep=False)
        raise
    return run_dir


def _write_atomically(path: Path, text: str) -> None:
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
