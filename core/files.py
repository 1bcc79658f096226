"""Atomic files: what is saved is either the old file or the whole new one, never half of either.

Every writer of the project goes through here: a temporary file beside the target
(``.NAME.<pid>.tmp``, the pid telling a later sweep whether its writer still runs), written,
flushed and fsynced, then renamed over the target in one step. A failure removes the temporary
file (which frees the space a full disk ran out of) and raises ``OSError`` naming the target,
also when it happens in a write to the open file (a streaming writer on a full disk): the first
failed write removes the temporary file at once, whoever called it.

- :func:`atomic_write`: a context manager yielding the open temporary file, for writers that
  stream (``torch.save``, msgpack packers, image encoders);
- :func:`write_bytes_atomic`, :func:`write_text_atomic`, :func:`write_json_atomic`: whole
  contents at once;
- :class:`AtomicFile`: the same steps spread over a writer's lifetime (a replay streamed frame by
  frame): ``commit()`` moves it into place, ``abort()`` gives it up;
- :func:`atomic_path`: for writers that take a file name rather than an open file (an encoder run
  as another process, a profiler's trace export).

Text is written as UTF-8 with ``\n`` line ends on every platform.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal, overload


def temporary_path(path: str | Path) -> Path:
    """The temporary name an atomic writer of ``path`` uses: ``.NAME.<pid>.tmp`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


_TEMPORARY_NAME = re.compile(r"^\..+\.(\d+)\.tmp$")


def writer_pid(path: str | Path) -> int | None:
    """The pid in a name :func:`temporary_path` gives (the writer that made the file), or None
    for any other name."""
    m = _TEMPORARY_NAME.match(Path(path).name)
    return None if m is None else int(m.group(1))


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` with ``path`` (the target, not the temporary file) as its filename."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


def _discard(tmp: Path) -> None:
    with contextlib.suppress(OSError):  # on a read-only disk even this unlink fails
        tmp.unlink()


class _TemporaryFile(io.FileIO):
    """The temporary file's raw writes: the first that fails removes the temporary file (its
    name now; its space once it is closed) and every failure is an ``OSError`` naming the
    target, so a writer's "cannot write PATH" names the file it meant to write."""

    def __init__(self, tmp: Path, target: Path) -> None:
        super().__init__(tmp, "w")
        self.tmp, self.target = tmp, target

    def write(self, data: Any) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            _discard(self.tmp)
            raise _naming(exc, self.target) from exc


def _open_temporary(tmp: Path, target: Path, mode: Literal["wb", "w"]) -> IO[Any]:
    raw = _TemporaryFile(tmp, target)
    buffered = io.BufferedWriter(raw)
    if mode == "wb":
        return buffered
    return io.TextIOWrapper(buffered, encoding="utf-8", newline="\n")


class AtomicFile:
    """A file written under a temporary name and moved into place by :meth:`commit`.

    ``mode`` is ``"wb"`` or ``"w"``. Until :meth:`commit` the target is untouched; :meth:`abort`
    (also called by a failed commit) closes and removes the temporary file.
    """

    def __init__(self, path: str | Path, mode: Literal["wb", "w"] = "wb") -> None:
        if mode not in ("wb", "w"):
            raise ValueError(f"AtomicFile mode must be 'wb' or 'w', got {mode!r}")
        self.path = Path(path)
        self.tmp = temporary_path(self.path)
        try:
            # Closed by commit() or abort().
            self.file: IO[Any] | None = _open_temporary(self.tmp, self.path, mode)
        except OSError as exc:
            raise _naming(exc, self.path) from exc

    @property
    def handle(self) -> IO[Any]:
        """The open temporary file (``ValueError`` once committed or aborted)."""
        if self.file is None:
            raise ValueError(f"{self.path} is already closed")
        return self.file

    def commit(self) -> Path:
        """Flush, fsync and rename over the target; returns the target's path."""
        f = self.handle
        try:
            f.flush()
            os.fsync(f.fileno())
            f.close()
            self.file = None
            os.replace(self.tmp, self.path)
        except BaseException as exc:
            self.abort()
            if isinstance(exc, OSError):
                raise _naming(exc, self.path) from exc
            raise
        return self.path

    def abort(self) -> None:
        """Give the write up: close and remove the temporary file (idempotent)."""
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.close()
            self.file = None
        _discard(self.tmp)


@overload
def atomic_write(path: str | Path, mode: Literal["wb"] = "wb") -> contextlib.AbstractContextManager[IO[bytes]]: ...
@overload
def atomic_write(path: str | Path, mode: Literal["w"]) -> contextlib.AbstractContextManager[IO[str]]: ...


def atomic_write(path: str | Path, mode: Literal["wb", "w"] = "wb") -> contextlib.AbstractContextManager[IO[Any]]:
    """``with atomic_write(path) as f: ...``: ``f`` is the temporary file; the target is replaced
    when the block ends without an exception, and untouched (the temporary file removed) when it
    raises."""
    return _atomic_write(path, mode)


@contextlib.contextmanager
def _atomic_write(path: str | Path, mode: Literal["wb", "w"]) -> Iterator[IO[Any]]:
    out = AtomicFile(path, mode)
    try:
        yield out.handle
    except BaseException as exc:
        out.abort()
        if isinstance(exc, OSError):
            raise _naming(exc, out.path) from exc
        raise
    out.commit()


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """``with atomic_path(path) as tmp: ...``: ``tmp`` is the temporary name for a writer that
    opens the file itself; when the block ends without an exception the file written there is
    fsynced and renamed over the target, and when it raises the file is removed and the target
    left untouched."""
    target = Path(path)
    tmp = temporary_path(target)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        _discard(tmp)
        if isinstance(exc, OSError):
            raise _naming(exc, target) from exc
        raise


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically."""
    with atomic_write(path, "w") as f:
        f.write(text)


def write_json_atomic(path: str | Path, payload: Any) -> None:
    """Replace ``path`` with ``payload`` as indented JSON atomically."""
    write_text_atomic(path, json.dumps(payload, indent=2))
