"""Checkpoints: model, optimizer, normalization statistics (in the model's buffers), policy
version, config, observation layout and RNG states.

Files are written atomically (temporary file in the same folder, fsync, rename, fsync of the
folder), so a crash mid-write never leaves a half-written checkpoint under a real name and the
previous checkpoint stays usable. Loading uses ``torch.load(weights_only=True)``: a checkpoint is
plain tensors and containers, never pickled code.
"""

from __future__ import annotations

import os
import random
import re
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
_NAME_RE = re.compile(r"^ckpt_(\d{9,})\.pt$")


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated, corrupt or incompatible."""


def checkpoint_name(policy_version: int) -> str:
    """File name of the checkpoint of ``policy_version``."""
    return f"ckpt_{policy_version:09d}.pt"


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Versioned checkpoints in ``directory``, oldest first (``latest.pt`` excluded)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := _NAME_RE.match(p.name))]
    return [p for _, p in sorted(found)]


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # some platforms cannot open folders; the rename is still atomic there
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save`` to ``path`` atomically: temporary file, flush, fsync, rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)
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


def save_checkpoint(directory: str | Path, learner: PPOLearner, extra: dict[str, Any] | None = None,
                    keep_last: int = 3) -> Path:
    """Write ``directory/ckpt_<version>.pt`` and ``directory/latest.pt`` atomically and delete
    all but the newest ``keep_last`` versioned checkpoints. Returns the versioned path.

    Under data parallel only rank 0 writes; other ranks return the path without writing.
    ``extra`` is any plain data (numbers, strings, tensors, lists, dicts) to keep alongside.
    """
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last must be an integer >= 1, got {keep_last!r}")
    directory = Path(directory)
    path = directory / checkpoint_name(learner.policy_version)
    if rank() != 0:
        return path
    directory.mkdir(parents=True, exist_ok=True)
    state = learner_state(learner, extra)
    atomic_torch_save(state, path)
    _update_latest(path)
    for old in list_checkpoints(directory)[:-keep_last]:
        old.unlink(missing_ok=True)
    return path


def _update_latest(path: Path) -> None:
    latest = path.with_name(LATEST_NAME)
    tmp = path.with_name(f".{LATEST_NAME}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)  # a hard link costs no copy and survives deletion of the versioned file
    except OSError:
        atomic_torch_save(torch.load(path, map_location="cpu", weights_only=True), latest)
        return
    os.replace(tmp, latest)
    _fsync_dir(path.parent)


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint file's contents with ``weights_only=True``; a missing, truncated or
    corrupt file raises :class:`CheckpointError` naming the file."""
    path = Path(path)
    if path.is_dir():
        path = path / LATEST_NAME
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for damaged archives
        raise CheckpointError(
            f"checkpoint {path} is unreadable (truncated or corrupt?): {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} is not a learner checkpoint of format {FORMAT_VERSION}")
    return state


def load_checkpoint(path: str | Path, learner: PPOLearner, expected_layout: dict[str, Any] | None = None,
                    restore_rng: bool = True) -> dict[str, Any]:
    """Restore ``learner`` (model, normalization statistics, optimizer, policy version, shuffle
    and global RNG states) from ``path`` (a file, or a folder meaning its ``latest.pt``).

    ``expected_layout`` defaults to ``learner.obs_layout``; a checkpoint saved with a different
    observation layout is refused with a ``ValueError`` saying what differs. Returns the
    checkpoint's ``extra`` dict. The learning-rate schedule continues from the restored version.
    """
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
    learner.policy.load_state_dict(state["model"])
    learner.optimizer.load_state_dict(state["optimizer"])
    learner.policy_version = int(state["policy_version"])
    learner._generator.set_state(state["shuffle_rng"].cpu())
    if restore_rng:
        _set_rng_state(state["rng"])
    return state["extra"]


def load_policy(path: str | Path, device: str | torch.device = "cpu") -> ActorCritic:
    """The policy network of a checkpoint (for evaluation or ``agents.PolicyAgent``), in eval
    mode on ``device``. Its ``obs_layout`` attribute holds the saved layout metadata (or None)."""
    state = read_checkpoint(path, map_location="cpu")
    policy = ActorCritic.from_init_kwargs(state["model_kwargs"])
    policy.load_state_dict(state["model"])
    policy.obs_layout = state.get("obs_layout")
    policy.policy_version = int(state["policy_version"])
    return policy.to(device).eval()


def _describe_layout_difference(saved: dict[str, Any], current: dict[str, Any]) -> str:
    if "names" in saved and "names" in current:
        return ObsLayout.describe_difference(saved, current) or "metadata differs"
    keys = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    return "; ".join(f"{k}: saved {saved.get(k)!r} != current {current.get(k)!r}" for k in keys)
