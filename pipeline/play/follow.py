"""``--follow RUN``: fly the newest checkpoint of a training run that is still going.

The run's checkpoints are written atomically (a new file is renamed into place), yet a file is
taken only once it has looked the same (size and modification time) on two polls in a row and
has loaded; one that fails to load is reported once and left until it changes.
"""

from __future__ import annotations

from pathlib import Path

from learner.checkpoint.files import CHECKPOINTS_DIR, numbered_checkpoints, resolve_checkpoint_path

FOLLOW_POLL_S = 1.0
"""Seconds between two looks at the run's checkpoints."""


def newest_checkpoint(run: Path) -> Path:
    """The run's newest checkpoint: its highest-numbered ``ckpt_*.pt`` (never rewritten once
    written), else what ``RUN`` resolves to (``checkpoints/latest.pt``); a ``CheckpointError``
    (``ValueError``) when it holds none."""
    numbered = numbered_checkpoints(run / CHECKPOINTS_DIR) or numbered_checkpoints(run)
    return numbered[-1][1] if numbered else resolve_checkpoint_path(run)


class Follower:
    """Watches ``run`` for a newer checkpoint for the seat ``side``."""

    def __init__(self, run: str, side: str, decide_every: int = 1, poll_s: float = FOLLOW_POLL_S) -> None:
        self.run = Path(run)
        self.side = side
        self.decide_every = decide_every
        self.poll_s = poll_s
        self.current = newest_checkpoint(self.run)
        """The checkpoint flown now."""
        self._current_sig = self._signature(self.current)
        self._seen: tuple[Path, tuple[int, int]] | None = None
        self._failed: tuple[Path, tuple[int, int]] | None = None

    @staticmethod
    def _signature(path: Path) -> tuple[int, int]:
        st = path.stat()
        return st.st_size, st.st_mtime_ns

    def poll(self) -> Path | None:
        """A checkpoint to load now: newer than the one flown, unchanged since the last poll,
        and not one that failed to load as it is; else None."""
        try:
            path = newest_checkpoint(self.run)
            sig = self._signature(path)
        except (OSError, ValueError):
            return None
        if (path, sig) == (self.current, self._current_sig) or (path, sig) == self._failed:
            return None
        stable = self._seen == (path, sig)
        self._seen = (path, sig)
        return path if stable else None

    def loaded(self, path: Path) -> None:
        """``path`` loaded: it is flown from now on."""
        self.current = path
        self._current_sig = self._seen[1] if self._seen and self._seen[0] == path else self._signature(path)

    def failed(self, path: Path) -> None:
        """``path`` did not load: leave it until it changes."""
        if self._seen is not None and self._seen[0] == path:
            self._failed = self._seen
