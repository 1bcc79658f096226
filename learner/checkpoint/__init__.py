"""Checkpoints: model, optimizer, normalization statistics (in the model's buffers), policy
version, config, observation layout and RNG states.

Files are written atomically (temporary file ``.NAME.<pid>.tmp`` in the same folder, fsync,
rename, fsync of the folder), so a crash mid-write never leaves a half-written checkpoint under a
real name and the previous checkpoint stays usable; a failed write removes its temporary file,
and :func:`sweep_stale_tmp` removes those of a writer that was killed. A learner holding NaN or
inf is never saved (:class:`NonFiniteStateError`). Loading uses ``torch.load(weights_only=True)``
(plain tensors and containers, never pickled code) after checking the archive's CRCs: a damaged
file raises :class:`CheckpointError` with one line naming the file and what is wrong with it.

The parts: :mod:`learner.checkpoint.files` (names, listing, the errors),
:mod:`learner.checkpoint.saving` (the write and sweep side), :mod:`learner.checkpoint.loading`
(the load-and-verify side), :mod:`learner.checkpoint.export` (policy-only files),
:mod:`learner.checkpoint.average` (the mean of a run's checkpoints as one policy-only file),
:mod:`learner.checkpoint.rng` (the global RNG states).
"""

from learner.checkpoint.files import (
    CHECKPOINTS_DIR,
    FORMAT_VERSION,
    LATEST_NAME,
    CheckpointError,
    NonFiniteStateError,
    checkpoint_name,
    list_checkpoints,
    resolve_checkpoint_path,
)
from learner.checkpoint.loading import load_checkpoint, load_policy, read_checkpoint
from learner.checkpoint.saving import (
    atomic_torch_save,
    check_finite_state,
    learner_state,
    save_checkpoint,
    sweep_stale_tmp,
)

__all__ = [
    "CHECKPOINTS_DIR", "FORMAT_VERSION", "LATEST_NAME", "CheckpointError", "NonFiniteStateError",
    "atomic_torch_save", "check_finite_state", "checkpoint_name", "learner_state", "list_checkpoints",
    "load_checkpoint", "load_policy", "read_checkpoint", "resolve_checkpoint_path", "save_checkpoint",
    "sweep_stale_tmp",
]
