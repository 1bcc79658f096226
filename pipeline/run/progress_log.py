"""A run's learning curve on disk: ``RUN/progress.csv`` (always) and TensorBoard event files
(``--tensorboard``, when the ``tensorboard`` package is installed).

Every progress report of a run (``run.log_interval_s``) appends one row per opponent played in
it to ``RUN/progress.csv`` (columns: :data:`COLUMNS`). A resumed run appends to the same file,
its ``wall_s`` continuing from the last row and ``session`` counting up, so one file holds the
whole curve; the rows past the resumed checkpoint's agent-steps (training a killed run lost)
are dropped first. Each report is one ``write`` of whole lines on a file opened for appending, so a
killed run leaves at most its last line torn, which :func:`read_progress` skips, and a write that
fails (a full disk) is cut back off and raises ``OSError`` naming the file
(:func:`pipeline.run.outputs.append_whole`).

``python -m pipeline.plot RUN [RUN...] --png OUT`` draws the curves.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from core.files import write_text_atomic
from pipeline.run.outputs import append_whole
from pipeline.run.tensorboard_events import EventFile

PROGRESS_FILE = "progress.csv"
TENSORBOARD_DIR = "tensorboard"

COLUMNS = (
    "time_utc", "session", "wall_s", "agent_steps", "updates", "agent_steps_per_s", "policy_version",
    "opponent", "episodes", "win_rate", "draw_rate", "loss_rate", "return_mean",
    "loss_policy", "loss_value", "entropy", "approx_kl", "clip_fraction", "explained_variance",
    "learning_rate", "rating",
)
"""The columns of ``progress.csv``. ``return_mean``: the mean episode return (Gymnasium envs),
or for the sim the outcome return ``win_rate − loss_rate``; ``episodes``: the finished episodes
the rates are over; the learner columns are its last update's; ``rating`` the learner's league
rating (Elo scale) where a league runs; an empty cell is a value the run does not have."""

LEARNER_COLUMNS = ("loss_policy", "loss_value", "entropy", "approx_kl", "clip_fraction",
                   "explained_variance", "learning_rate")


def tensorboard_available() -> bool:
    """Whether TensorBoard event files can be written here."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


class ProgressLog:
    """Appends progress rows to ``run_dir/progress.csv`` (and TensorBoard scalars).

    Args:
        run_dir: the run directory (claimed by the run).
        tensorboard: also write ``run_dir/tensorboard`` event files (needs the package).
        agent_steps_before: the agent-steps the run starts from (a resumed checkpoint's count):
            rows past it, of training a killed run lost, are dropped from the file first (in
            one atomic rewrite), with a torn last line, so the curve goes on from the
            checkpoint rather than drawing the lost part twice.
    """

    def __init__(self, run_dir: str | Path, tensorboard: bool = False,
                 agent_steps_before: int | None = None) -> None:
        self.path = Path(run_dir) / PROGRESS_FILE
        self.dropped_rows = 0
        """Rows of training the run's checkpoint does not hold, dropped (see ``agent_steps_before``)."""
        if agent_steps_before is not None and self.path.is_file():
            self.dropped_rows = _drop_rows_after(self.path, agent_steps_before)
        previous = read_progress(self.path) if self.path.is_file() else []
        self.columns = _header(self.path) or COLUMNS
        self.wall_offset_s = max((_float(r.get("wall_s")) or 0.0 for r in previous), default=0.0)
        self.session = max((int(_float(r.get("session")) or 0) for r in previous), default=0) + 1
        self._needs_header = not self.path.is_file() or self.path.stat().st_size == 0
        self._tb: EventFile | None = None
        if tensorboard:
            if not tensorboard_available():
                raise ImportError("--tensorboard needs the tensorboard package: pip install 'midrange-rl[tensorboard]'")
            self._tb = EventFile(Path(run_dir) / TENSORBOARD_DIR)

    def append(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append ``rows`` (column -> value; missing columns are left empty). ``wall_s`` is the
        seconds of this session; the file holds it counted from the run's first session."""
        if not rows:
            return
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=list(self.columns), extrasaction="ignore",
                                lineterminator="\n")
        if self._needs_header:
            writer.writeheader()
        full = []
        for row in rows:
            r = {k: _cell(v) for k, v in row.items()}
            r["time_utc"], r["session"] = now, str(self.session)
            if "wall_s" in row:
                r["wall_s"] = _cell(float(row["wall_s"]) + self.wall_offset_s)
            full.append(r)
            writer.writerow(r)
        append_whole(self.path, text.getvalue().encode())
        self._needs_header = False
        if self._tb is not None:
            _scalars(self._tb, full)

    def close(self) -> None:
        """Write nothing more (every append is on disk when it returns)."""
        self._tb = None


def _scalars(events: EventFile, rows: Sequence[Mapping[str, Any]]) -> None:
    """``rows`` as TensorBoard scalars: the outcome columns per opponent, the rest as ``train/``."""
    for row in rows:
        values: dict[str, float] = {}
        opponent = str(row.get("opponent") or "all")
        for key, value in row.items():
            v = _float(value)
            if v is None or key in ("agent_steps", "opponent", "session", "time_utc"):
                continue
            per_opponent = key in ("episodes", "win_rate", "draw_rate", "loss_rate", "return_mean")
            values[f"{key}/{opponent}" if per_opponent else f"train/{key}"] = v
        events.scalars(int(_float(row.get("agent_steps")) or 0), values)


def progress_rows(snapshot: Any, learner_stats: Mapping[str, float], opponents: Mapping[str, tuple[float, float, float, int]] | None = None,
                  rating: float | None = None) -> list[dict[str, Any]]:
    """The rows of one report from a display snapshot (``pipeline.run.display.Progress``), the
    learner's last statistics and, where several opponents are played, each one's
    (win, draw, loss rate, episodes); else the snapshot's own rates against its opponent."""
    common: dict[str, Any] = {
        "wall_s": snapshot.elapsed_s, "agent_steps": snapshot.agent_steps, "updates": snapshot.updates,
        "agent_steps_per_s": snapshot.agent_steps_per_s, "policy_version": snapshot.policy_version,
        "rating": rating,
    }
    common.update({k: learner_stats[k] for k in LEARNER_COLUMNS if k in learner_stats})
    if snapshot.return_mean is not None:
        return [{**common, "opponent": snapshot.opponent, "episodes": snapshot.episodes,
                 "return_mean": snapshot.return_mean}]
    table = dict(opponents) if opponents else {
        snapshot.opponent: (snapshot.win_rate, snapshot.draw_rate, snapshot.loss_rate, snapshot.episodes)}
    rows = []
    for name, (win, draw, loss, episodes) in table.items():
        rows.append({**common, "opponent": name, "episodes": episodes,
                     **({"win_rate": win, "draw_rate": draw, "loss_rate": loss, "return_mean": win - loss}
                        if episodes else {})})
    return rows


def read_progress(path: str | Path) -> list[dict[str, str]]:
    """The rows of a ``progress.csv`` (a torn last line, from a killed run, is left out)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if lines and lines[-1] != "":
        lines = lines[:-1]  # no line end: torn by a killed writer
    reader = csv.DictReader(lines)
    width = len(reader.fieldnames or [])
    return [row for row in reader if len(row) == width and None not in row.values()]


def _drop_rows_after(path: Path, agent_steps: int) -> int:
    """Rewrite ``path`` (atomically) without its rows past ``agent_steps`` and a torn last
    line; the number of rows dropped (the file is left alone when there are none)."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    torn = lines[-1] != ""
    lines = lines[:-1]
    if not lines:
        return 0
    header = next(csv.reader([lines[0]]))
    if "agent_steps" not in header:
        return 0
    column = header.index("agent_steps")
    kept = [lines[0]]
    for line in lines[1:]:
        cells = next(csv.reader([line]), [])
        steps = _float(cells[column]) if len(cells) == len(header) else None
        if steps is None or steps <= agent_steps:
            kept.append(line)
    if len(kept) == len(lines) and not torn:
        return 0
    write_text_atomic(path, "\n".join(kept) + "\n")
    return len(lines) - len(kept)


def _header(path: Path) -> tuple[str, ...] | None:
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as f:
        first = f.readline().strip()
    return tuple(first.split(",")) if first else None


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.6g}"
    return str(value)


def _float(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
