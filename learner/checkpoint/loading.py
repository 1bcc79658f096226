"""Loading checkpoints: each file verified (a complete zip archive, matching CRCs, a torch file
of this format holding every required entry) before ``torch.load(weights_only=True)``, and a
damaged or incompatible one refused in one line naming it."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from core.command import squeezed
from learner.checkpoint.files import FORMAT_VERSION, CheckpointError, resolve_checkpoint_path
from learner.checkpoint.rng import set_rng_state
from learner.network import ActorCritic
from learner.ppo import PPOLearner
from sim.layout import ObsLayout

_REQUIRED = ("policy_version", "model", "model_kwargs", "optimizer", "shuffle_rng", "config", "rng")
POLICY_ONLY = "policy"
"""The ``kind`` of a file holding a policy alone (:mod:`learner.checkpoint.export`): flown and
evaluated like a checkpoint, never resumed."""
_REQUIRED_POLICY = ("policy_version", "model", "model_kwargs")


def _first_line(exc: BaseException | str, limit: int = 160) -> str:
    text = squeezed(exc) or type(exc).__name__
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
    required = _REQUIRED_POLICY if state.get("kind") == POLICY_ONLY else _REQUIRED
    missing = [k for k in required if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} is incomplete (missing: {', '.join(missing)})")


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint's contents with ``weights_only=True``. ``path`` is a file, a
    checkpoints folder or a run directory (:func:`resolve_checkpoint_path`); a policy-only file
    (``kind`` :data:`POLICY_ONLY`) needs only the policy's entries. A missing, empty,
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
    if state.get("kind") == POLICY_ONLY:
        raise CheckpointError(f"checkpoint {path} holds a policy only (no optimizer state): it "
                              "can fly and be evaluated, not be resumed")
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
        set_rng_state(state["rng"])
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
