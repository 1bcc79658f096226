"""Checkpoints: model, optimizer, normalization statistics (in the model's buffers), policy
version, config, observation layout and RNG states.

Files are written atomically (temporary file ``.NAME.<pid>.tmp`` in the same folder, fsync,
rename, fsync of the folder), so a crash mid-write never leaves a half-written checkpoint under a
real name and the previous checkpoint stays usable; a failed write removes its temporary file,
and :func:`sweep_stale_tmp` removes those of a writer that was killed. A learner holding NaN or
inf is never saved (:class:`NonFiniteStateError`). Loading uses ``torch.load(weights_only=True)``
(plain tensors and containers, never pickled code) after checking the archive's CRCs: a damaged
file raises :class:`CheckpointError` with one line naming the file and what is wrong with it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import re
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from learner.distributed import rank
from learner.network import ActorCritic
from learner.ppo import PPOLearner
from sim.layout import ObsLayout

FORMAT_VERSION = 1
LATEST_NAME = "latest.pt"
CHECKPOINTS_DIR = "checkpoints"
_NAME_RE = re.compile(r"^ckpt_(\d{9,})\.pt$")
_TMP_RE = re.compile(r"^\..+\.(\d+)\.tmp$")
_REQUIRED = ("policy_version", "model", "model_kwargs", "optimizer", "shuffle_rng", "config", "rng")
_DISK_FULL_BYTES = 1 << 20
"""Free space below which a failed write is put down to a full disk (checked before the
temporary file is removed, so a write that filled the disk still sees it full)."""
# Errors of os.link that mean "no hard links here" (a copy is made instead); any other error
# (a full disk, a read-only folder) would fail the copy too and is reported as it is.
_NO_HARD_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


class CheckpointError(ValueError):
    """A checkpoint is missing, truncated, corrupt or incompatible, or could not be written; the
    message is one line naming the file. A ``ValueError``, so command lines report it as bad
    input (exit status 2)."""


class NonFiniteStateError(CheckpointError):
    """The learner holds NaN or inf; saving it would replace a good checkpoint by a broken one.
    A :class:`CheckpointError` (so a ``ValueError``): whoever reports a failed save reports it."""


def checkpoint_name(policy_version: int) -> str:
    """File name of the checkpoint of ``policy_version``."""
    return f"ckpt_{policy_version:09d}.pt"


def _numbered(directory: Path) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME_RE.match(p.name)))


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Versioned checkpoints in ``directory``, oldest first (``latest.pt`` excluded)."""
    return [p for _, p in _numbered(Path(directory))]


def resolve_checkpoint_path(path: str | Path) -> Path:
    """A checkpoint file, a checkpoints folder (``DIR/latest.pt``) or a run directory
    (``DIR/checkpoints/latest.pt``) → the checkpoint file; :class:`CheckpointError` naming
    what was looked for otherwise."""
    p = Path(path)
    if p.is_dir():
        candidates = (p / LATEST_NAME, p / CHECKPOINTS_DIR / LATEST_NAME)
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        numbered = list_checkpoints(p) or list_checkpoints(p / CHECKPOINTS_DIR)
        hint = f"; it holds {numbered[-1]}, which can be named instead" if numbered else ""
        raise CheckpointError(f"no checkpoint in {p} (looked for {candidates[0]} and "
                              f"{candidates[1]}){hint}")
    if p.is_file():
        return p
    if p.exists():
        raise CheckpointError(f"checkpoint {p} is not a regular file")
    raise CheckpointError(f"no checkpoint at {p} (no such file or directory)")


def temporary_path(path: str | Path) -> Path:
    """The temporary name an atomic writer of ``path`` uses: ``.NAME.<pid>.tmp`` beside it (the
    pid tells :func:`sweep_stale_tmp` whether its writer still runs)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


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
        m = _TMP_RE.match(p.name)
        if m is None or not p.is_file() or p.is_symlink() or _pid_alive(int(m.group(1))):
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


def _write_failure(exc: BaseException, path: Path, last_good: Path | None, when: str) -> CheckpointError | None:
    """``exc``, raised writing ``path``, as one line, or None when it is no I/O failure."""
    os_error = _os_error_in(exc)
    if os_error is not None:
        what = (os_error.strerror or str(os_error)).lower()
    elif isinstance(exc, RuntimeError) and _free_bytes(path.parent) < _DISK_FULL_BYTES:
        what = os.strerror(errno.ENOSPC).lower()  # torch's writer lost the errno on the way
    else:
        return None  # no I/O failure (say, an object that cannot be saved): raised as it is
    note = f"the last good checkpoint is {last_good}" if last_good else "no earlier checkpoint exists"
    return CheckpointError(f"{what} while {when} {path} ({note})")


def _atomic_save(obj: Any, path: Path, last_good: Path | None) -> None:
    tmp = temporary_path(path)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        # Judged before the temporary file goes: removing it frees the space it filled.
        failure = _write_failure(exc, path, last_good, "writing") if isinstance(exc, Exception) else None
        _discard(tmp)
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


def _rng_state() -> dict[str, Any]:
    # The legacy global numpy RNG is what third-party code seeds and draws from; keep it too.
    np_state = np.random.get_state()  # noqa: NPY002
    if not isinstance(np_state, tuple):  # legacy=True, the default, gives the tuple form
        raise TypeError(f"numpy.random.get_state() gave a {type(np_state).__name__}, not a tuple")
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        # numpy's state holds an ndarray, which weights_only loading refuses: store it as a tensor.
        "numpy": {"key": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": {"version": py_version, "internal": list(py_internal), "gauss_next": py_gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    key = n["key"].cpu().numpy().astype(np.uint32)
    np.random.set_state(("MT19937", key, n["pos"], n["has_gauss"], n["cached_gaussian"]))  # noqa: NPY002
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


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
        "rng": _rng_state(),
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
    last_good = latest if latest.is_file() else (older[-1] if older else None)
    _atomic_save(learner_state(learner, extra), path, last_good)
    _update_latest(path)
    _prune(directory, learner.policy_version, keep_last)
    return path


def _update_latest(path: Path) -> None:
    """Point ``latest.pt`` at ``path`` atomically (a hard link, or a copy where links fail)."""
    latest = path.with_name(LATEST_NAME)
    tmp = temporary_path(latest)
    _discard(tmp)
    try:
        os.link(path, tmp)  # a hard link costs no copy and survives deletion of the versioned file
        os.replace(tmp, latest)
    except OSError as exc:
        _discard(tmp)
        if exc.errno not in _NO_HARD_LINKS:
            failure = _write_failure(exc, latest, path, "linking")
            raise (failure or exc) from exc
        _atomic_save(torch.load(path, map_location="cpu", weights_only=True), latest, path)
        return
    _fsync_dir(path.parent)


def _prune(directory: Path, version: int, keep_last: int) -> None:
    """Delete versioned checkpoints below ``version`` beyond the newest ``keep_last - 1`` of
    them. Only lower versions: a folder may hold an earlier run's higher ones, and sorting
    everything by version would delete the checkpoint just written."""
    lower = [p for v, p in _numbered(directory) if v < version]
    for old in lower[:max(len(lower) - (keep_last - 1), 0)]:
        old.unlink(missing_ok=True)


def _first_line(exc: BaseException | str, limit: int = 160) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_archive(path: Path) -> None:
    """Refuse, in one line each, an empty file, a file that is no (complete) zip archive, a zip
    archive that is no torch file, and an archive whose CRCs do not match (torch itself would
    load flipped bits silently)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(4)
        if size == 0:
            raise CheckpointError(f"checkpoint {path} is empty (0 bytes)")
        if not zipfile.is_zipfile(path):
            what = (f"a zip archive cut short at {size} bytes" if head == b"PK\x03\x04"
                    else "not a zip archive")
            raise CheckpointError(f"checkpoint {path} is truncated or corrupt ({what})")
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            if not any(n.endswith("/data.pkl") for n in names):
                raise CheckpointError(f"{path} is not a midrange-rl checkpoint (format: a zip "
                                      "archive, but no torch file)")
            bad = archive.testzip()
    except CheckpointError:
        raise
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as exc:
        reason = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else _first_line(exc)
        raise CheckpointError(f"cannot read checkpoint {path}: {reason}") from exc
    if bad is not None:
        raise CheckpointError(f"checkpoint {path} is corrupt (CRC mismatch in {bad})")


def _check_format(path: Path, state: Any) -> None:
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} is not a midrange-rl checkpoint (format: a torch file "
                              f"holding a {type(state).__name__}, not a dict)")
    if "format_version" not in state:
        keys = ", ".join(sorted(map(str, state))[:5]) or "none"
        raise CheckpointError(f"{path} is not a midrange-rl checkpoint (format: a dict without "
                              f"format_version; keys: {keys})")
    if state["format_version"] != FORMAT_VERSION:
        raise CheckpointError(f"{path} is not a midrange-rl checkpoint of this version (format "
                              f"{state['format_version']!r}; this code reads format {FORMAT_VERSION})")
    missing = [k for k in _REQUIRED if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete (missing: {', '.join(missing)})")


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint's contents with ``weights_only=True``. ``path`` is a file, a
    checkpoints folder or a run directory (:func:`resolve_checkpoint_path`). A missing, empty,
    truncated, corrupt or foreign file raises :class:`CheckpointError`: one line naming the
    file and what is wrong with it."""
    path = resolve_checkpoint_path(path)
    _check_archive(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for damaged archives
        text = str(exc)
        if "Weights only load failed" in text:
            found = re.search(r"Unsupported global: GLOBAL (\S+)", text)
            what = f" ({found.group(1)})" if found else ""
            raise CheckpointError(f"{path} is not a midrange-rl checkpoint (format: it holds "
                                  f"Python objects{what}, which are not loaded)") from exc
        raise CheckpointError(f"checkpoint {path} is corrupt: {_first_line(exc)}") from exc
    _check_format(path, state)
    return state


def _load_state(module: torch.nn.Module | torch.optim.Optimizer, state: Any, path: Path, what: str) -> None:
    """``load_state_dict``, its (multi-line) error turned into one line naming the file."""
    try:
        module.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        lines = [s.strip() for s in str(exc).splitlines() if s.strip()]
        detail = lines[1] if len(lines) > 1 else (lines[0] if lines else type(exc).__name__)
        raise CheckpointError(f"checkpoint {path}: its {what} does not fit: {_first_line(detail)}") from exc


def load_checkpoint(path: str | Path, learner: PPOLearner, expected_layout: dict[str, Any] | None = None,
                    restore_rng: bool = True) -> dict[str, Any]:
    """Restore ``learner`` (model, normalization statistics, optimizer, policy version, shuffle
    and global RNG states) from ``path`` (a file, a checkpoints folder or a run directory).

    ``expected_layout`` defaults to ``learner.obs_layout``; a checkpoint saved with a different
    observation layout or network is refused with a ``ValueError`` saying what differs. Returns
    the checkpoint's ``extra`` dict. The learning-rate schedule continues from the restored
    version.
    """
    path = resolve_checkpoint_path(path)
    # Read onto the CPU: RNG states must stay there; load_state_dict moves the rest to the device.
    state = read_checkpoint(path, map_location="cpu")
    expected = expected_layout if expected_layout is not None else learner.obs_layout
    saved_layout = state.get("obs_layout")
    if expected is not None and saved_layout is not None and saved_layout != expected:
        raise ValueError(f"checkpoint {path} has a different observation layout: "
                         f"{_describe_layout_difference(saved_layout, expected)}")
    if expected is not None and saved_layout is None:
        raise ValueError(f"checkpoint {path} records no observation layout; expected one of size "
                         f"{expected.get('size')}")
    current = learner.policy.init_kwargs()
    if state["model_kwargs"] != current:
        diff = {k: (state["model_kwargs"].get(k), v) for k, v in current.items()
                if state["model_kwargs"].get(k) != v}
        raise ValueError(f"checkpoint {path} holds a different network (saved, current): {diff}")
    _load_state(learner.policy, state["model"], path, "model")
    _load_state(learner.optimizer, state["optimizer"], path, "optimizer state")
    learner.policy_version = int(state["policy_version"])
    learner._generator.set_state(state["shuffle_rng"].cpu())
    if restore_rng:
        _set_rng_state(state["rng"])
    return state["extra"]


def load_policy(path: str | Path, device: str | torch.device = "cpu") -> ActorCritic:
    """The policy network of a checkpoint (a file, a checkpoints folder or a run directory; for
    evaluation or ``agents.PolicyAgent``), in eval mode on ``device``. Its ``obs_layout``
    attribute holds the saved layout metadata (or None)."""
    path = resolve_checkpoint_path(path)
    state = read_checkpoint(path, map_location="cpu")
    try:
        policy = ActorCritic.from_init_kwargs(state["model_kwargs"])
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"checkpoint {path} describes no network this code can build: "
                              f"{_first_line(exc)}") from exc
    _load_state(policy, state["model"], path, "model")
    policy.obs_layout = state.get("obs_layout")
    policy.policy_version = int(state["policy_version"])
    return policy.to(device).eval()


def _describe_layout_difference(saved: dict[str, Any], current: dict[str, Any]) -> str:
    if "names" in saved and "names" in current:
        return ObsLayout.describe_difference(saved, current) or "metadata differs"
    keys = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    return "; ".join(f"{k}: saved {saved.get(k)!r} != current {current.get(k)!r}" for k in keys)
