"""Writing checkpoints: atomically (``core.files``, then an fsync of the folder), never a learner
holding NaN or inf, a failed write reported in one line naming the last good checkpoint; the
``latest.pt`` pointer, pruning, and the sweep of temporary files a killed writer left."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from core.files import atomic_write, temporary_path, writer_pid
from learner.checkpoint.files import (
    FORMAT_VERSION,
    LATEST_NAME,
    CheckpointError,
    NonFiniteStateError,
    checkpoint_name,
    list_checkpoints,
    numbered_checkpoints,
)
from learner.checkpoint.rng import rng_state
from learner.distributed import rank
from learner.ppo import PPOLearner

_DISK_FULL_BYTES = 1 << 20
"""Free space below which a failed write is put down to a full disk (checked before the
temporary file is removed, so a write that filled the disk still sees it full)."""
# Errors of os.link that mean "no hard links here" (a copy is made instead); any other error
# (a full disk, a read-only folder) would fail the copy too and is reported as it is.
_NO_HARD_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


def _pid_alive(pid: int) -> bool:
    if pid <= 0 or pid == os.getpid():
        return True  # ours, or no pid a writer can have (os.kill(0, ...) would signal our group)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's live process, or no pid of this system
        pass
    return True


def sweep_stale_tmp(directory: str | Path) -> list[Path]:
    """Remove the temporary files (``.NAME.<pid>.tmp``) that writers no longer running left in
    ``directory`` (a writer killed mid-write); returns the removed paths. A live writer's file
    is never touched. The pid is checked on this host only: do not sweep a folder that writers
    on other machines share."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for p in sorted(directory.iterdir()):
        pid = writer_pid(p)
        if pid is None or not p.is_file() or p.is_symlink() or _pid_alive(pid):
            continue
        try:
            p.unlink()
        except FileNotFoundError:
            continue  # another sweeper got there first
        removed.append(p)
    return removed


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # some platforms cannot open folders; the rename is still atomic there
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _discard(tmp: Path) -> None:
    """Remove a temporary file if it is there. Never raises: on a read-only filesystem even
    removing a file that was never created fails (EROFS, not ENOENT)."""
    with contextlib.suppress(OSError):
        tmp.unlink()


def _os_error_in(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc``: torch's zip writer reports a failed write as a RuntimeError
    (``unexpected pos ...``) with the ENOSPC only in the chain."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, OSError):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def _free_bytes(directory: Path) -> int:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return 1 << 62


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (a full disk); the message ends naming the last good
    checkpoint, or saying that none exists."""


def _write_failure(exc: BaseException, path: Path, last_good: Path | None, when: str) -> CheckpointWriteError | None:
    """``exc``, raised writing ``path``, as one line, or None when it is no I/O failure."""
    os_error = _os_error_in(exc)
    if os_error is not None:
        what = (os_error.strerror or str(os_error)).lower()
    elif isinstance(exc, RuntimeError) and _free_bytes(path.parent) < _DISK_FULL_BYTES:
        what = os.strerror(errno.ENOSPC).lower()  # torch's writer lost the errno on the way
    else:
        return None  # no I/O failure (say, an object that cannot be saved): raised as it is
    note = f"the last good checkpoint is {last_good}" if last_good else "no earlier checkpoint exists"
    return CheckpointWriteError(f"{what} while {when} {path} ({note})")


def _atomic_save(obj: Any, path: Path, last_good: Path | None, shown: Path | None = None) -> None:
    """``torch.save`` to ``path`` atomically; a failed write names ``shown`` (default ``path``)."""
    shown = shown or path
    try:
        with atomic_write(path) as f:
            try:
                torch.save(obj, f)
            except Exception as exc:
                # Judged before the temporary file goes: removing it frees the space it filled.
                failure = _write_failure(exc, shown, last_good, "writing")
                if failure is None:
                    raise
                raise failure from exc
    except OSError as exc:  # opening, flushing, syncing or renaming the temporary file
        failure = _write_failure(exc, shown, last_good, "writing")
        if failure is None:
            raise
        raise failure from exc
    _fsync_dir(path.parent)


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save`` to ``path`` atomically: temporary file, flush, fsync, rename. A failed
    write leaves no temporary file and raises :class:`CheckpointError` (one line: a full disk
    is named as such); ``path`` keeps its previous contents."""
    path = Path(path)
    last_good = path if path.is_file() else None
    _atomic_save(obj, path, last_good)
    return path


def learner_state(learner: PPOLearner, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything a checkpoint holds, as plain tensors and containers."""
    return {
        "format_version": FORMAT_VERSION,
        "policy_version": int(learner.policy_version),
        "model": learner.policy.state_dict(),
        "model_kwargs": learner.policy.init_kwargs(),
        "optimizer": learner.optimizer.state_dict(),
        "shuffle_rng": learner._generator.get_state(),
        "config": learner.config.to_dict(),
        "obs_layout": learner.obs_layout,
        "rng": rng_state(),
        "extra": extra or {},
    }


def _named_state_tensors(learner: PPOLearner) -> Iterator[tuple[str, torch.Tensor]]:
    """The learner's floating-point state, each tensor with the name an error would give it."""
    names = {}
    for name, p in learner.policy.named_parameters():
        names[id(p)] = name
        yield f"model parameter {name}", p
    for name, b in learner.policy.named_buffers():
        yield f"model buffer {name}", b
    for group in learner.optimizer.param_groups:
        for p in group["params"]:
            for key, value in learner.optimizer.state.get(p, {}).items():
                if isinstance(value, torch.Tensor):
                    yield f"optimizer state {key} of {names.get(id(p), 'an unnamed parameter')}", value


def check_finite_state(learner: PPOLearner) -> None:
    """Raise :class:`NonFiniteStateError` naming the first model parameter, buffer or optimizer
    state tensor that holds NaN or inf.

    One host sync when all is well: fused norms per device and dtype, one flag read back. The
    per-tensor search runs only when a norm is not finite (a NaN or inf always makes it so; a
    huge finite tensor may too, by overflow, and then the search finds nothing and passes).
    """
    named = [(n, t) for n, t in _named_state_tensors(learner) if t.is_floating_point() or t.is_complex()]
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for _, t in named:
        groups.setdefault((t.device, t.dtype), []).append(t.detach())
    if not groups:
        return
    with torch.no_grad():
        flags = [torch.stack(torch._foreach_norm(ts)).isfinite().all() for ts in groups.values()]
        first = flags[0].device
        if bool(torch.stack([f.to(first) for f in flags]).all()):
            return
        for name, t in named:
            if not bool(t.isfinite().all()):
                kind = "NaN" if bool(t.isnan().any()) else "inf"
                raise NonFiniteStateError(f"refusing to save a non-finite checkpoint: {name} has {kind}")


def save_checkpoint(directory: str | Path, learner: PPOLearner, extra: dict[str, Any] | None = None,
                    keep_last: int = 3) -> Path:
    """Write ``directory/ckpt_<version>.pt`` and ``directory/latest.pt`` atomically and delete
    older versioned checkpoints beyond the newest ``keep_last`` (the one just written counted;
    higher versions, e.g. an earlier run's, are never deleted). Returns the versioned path.

    A learner holding NaN or inf raises :class:`NonFiniteStateError` and writes nothing. A
    failed write (a full disk) raises :class:`CheckpointError` naming the last good checkpoint,
    which stays loadable; no temporary file remains. Under data parallel every rank checks the
    state (so all raise alike) and only rank 0 writes. ``extra`` is any plain data (numbers,
    strings, tensors, lists, dicts) to keep alongside.
    """
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last must be an integer >= 1, got {keep_last!r}")
    directory = Path(directory)
    path = directory / checkpoint_name(learner.policy_version)
    check_finite_state(learner)
    if rank() != 0:
        return path
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot create the checkpoint folder {directory}: "
                              f"{(exc.strerror or str(exc)).lower()}") from exc
    latest = directory / LATEST_NAME
    older = list_checkpoints(directory)
    if latest.is_file():
        # latest.pt keeps naming the previous checkpoint until the new one is whole.
        _atomic_save(learner_state(learner, extra), path, latest)
        _publish(path, latest)
    else:
        # The first checkpoint: latest.pt first, so a writer killed between the two names
        # leaves a folder that resumes (a numbered file without latest.pt would not).
        _atomic_save(learner_state(learner, extra), latest, older[-1] if older else None, shown=path)
        _publish(latest, path)
    _prune(directory, learner.policy_version, keep_last)
    return path


def _publish(source: Path, name: Path) -> None:
    """Give ``source``'s contents the name ``name`` atomically: a hard link (no copy, and it
    survives deletion of the other name), or a copy where links fail."""
    tmp = temporary_path(name)
    _discard(tmp)
    try:
        os.link(source, tmp)
        os.replace(tmp, name)
    except OSError as exc:
        _discard(tmp)
        if exc.errno not in _NO_HARD_LINKS:
            failure = _write_failure(exc, name, source, "linking")
            raise (failure or exc) from exc
        _atomic_save(torch.load(source, map_location="cpu", weights_only=True), name, source)
        return
    _fsync_dir(name.parent)


def _prune(directory: Path, version: int, keep_last: int) -> None:
    """Delete versioned checkpoints below ``version`` beyond the newest ``keep_last - 1`` of
    them. Only lower versions: a folder may hold an earlier run's higher ones, and sorting
    everything by version would delete the checkpoint just written."""
    lower = [p for v, p in numbered_checkpoints(directory) if v < version]
    for old in lower[:max(len(lower) - (keep_last - 1), 0)]:
        old.unlink(missing_ok=True)
