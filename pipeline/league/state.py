"""``RUN/league/league.json``, the league's state: what it holds, and its checks when read back.

The file holds the anchors, the snapshots in the pool, the learner's record against each of them
(total wins, draws and losses, and the decayed recent counts the draws are weighted by), the
draw generator's state and the version of the last snapshot taken. Read back, every value is
checked against that schema (types, finite, non-negative, whole counts, one record per anchor
and snapshot, recent counts no larger than their totals, the generator's state of the right
size) and, on ``--resume``, against what the run had trained (:class:`StateLimits`): a damaged
file is one :class:`ConfigError` naming it and what is wrong, before anything is trained,
rather than a failure later in every actor.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from core.coerce import coerce
from pipeline.config import ConfigError

STATE_FILE = "league.json"
"""The league's state in its folder; the file that marks a folder as a league's pool."""
STATE_VERSION = 1
RNG_WORDS = 624
"""Words in the draw generator's state (Python's Mersenne Twister); the file keeps them and
the position in them, 625 integers."""
_SNAPSHOT_NAME = re.compile(r"v(\d+)")
_MESSAGE_CHARS = 300


def snapshot_name(version: int) -> str:
    """A snapshot's player name: ``v`` and the policy version it froze."""
    return f"v{version}"


@dataclass
class SavedRecord:
    """One opponent's entry in ``records``."""

    wins: int
    draws: int
    losses: int
    recent: tuple[float, float, float]


@dataclass
class SavedState:
    """The whole file, its values checked."""

    version: int
    anchors: list[str]
    snapshots: list[str]
    records: dict[str, SavedRecord]
    rng: list[int]
    last_snapshot_version: int


@dataclass(frozen=True)
class StateLimits:
    """What a resumed run's league file may claim, from the run it continues."""

    max_games: int
    """Games in all records together: at most one per agent-step the actors produced (those
    trained by the run's newest checkpoint, plus what the ring and the actors held and the
    chunks lost to failures)."""
    max_version: int
    """The newest policy version a snapshot can have been taken at: the newest checkpoint's."""
    checkpoint: Path
    """The checkpoint the limits come from (named in the messages)."""


def _fail(path: Path, text: str) -> ConfigError:
    message = f"{path}: {text}"
    if len(message) > _MESSAGE_CHARS:
        message = message[:_MESSAGE_CHARS - 3] + "..."
    return ConfigError(message)


def _require(path: Path, data: object, keys: tuple[str, ...], where: str) -> dict[str, object]:
    """``data`` as a JSON object holding every one of ``keys``."""
    if not isinstance(data, dict):
        raise _fail(path, f"{where or 'the file'} must be a JSON object, got {type(data).__name__} {data!r}")
    missing = [k for k in keys if k not in data]
    if missing:
        raise _fail(path, f"{where} is missing {', '.join(missing)}" if where
                    else f"missing field(s): {', '.join(missing)}")
    return data


def read_state(path: Path, limits: StateLimits | None = None) -> SavedState | None:
    """The league state at ``path``, every value checked (and against ``limits`` when given);
    None when there is no such file. Anything else is a one-line :class:`ConfigError` naming
    ``path``."""
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_dir():
        raise _fail(path, "is a directory, not the league's state file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _fail(path, f"cannot be read: {reason}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise _fail(path, f"is not JSON ({exc})") from None
    fields = ("version", "anchors", "snapshots", "records", "rng", "last_snapshot_version")
    top = _require(path, data, fields, "")
    if top["version"] != STATE_VERSION or isinstance(top["version"], bool):
        raise _fail(path, f"format version {top['version']!r}, this code reads {STATE_VERSION}")
    records = {name: _require(path, entry, ("wins", "draws", "losses", "recent"), f"records.{name}")
               for name, entry in _require(path, top["records"], (), "records").items()}
    try:
        saved = coerce(SavedState, {**top, "records": {}}, unknown="unknown field(s): {names}",
                       error=ConfigError)
        for name, entry in records.items():
            saved.records[name] = coerce(SavedRecord, entry, where=f"records.{name}", error=ConfigError)
    except ConfigError as exc:
        raise _fail(path, str(exc)) from None
    _check_state(path, saved, limits)
    return saved


def _check_state(path: Path, saved: SavedState, limits: StateLimits | None) -> None:
    """The checks beyond each value's type: ranges, consistency, and ``limits``."""
    for name, r in saved.records.items():
        for outcome, count, recent in zip(("wins", "draws", "losses"), (r.wins, r.draws, r.losses),
                                          r.recent, strict=True):
            if count < 0:
                raise _fail(path, f"records.{name}.{outcome} must be >= 0, got {count}")
            if recent < 0:
                raise _fail(path, f"records.{name}.recent must hold counts >= 0, got {list(r.recent)}")
            if recent > count * (1 + 1e-9) + 1e-6:
                raise _fail(path, f"records.{name}.recent {list(r.recent)} counts more {outcome} than "
                                  f"its total {count} (recent counts are decayed totals)")
    versions = []
    for name in saved.snapshots:
        match = _SNAPSHOT_NAME.fullmatch(name)
        if match is None:
            raise _fail(path, f"snapshots: {name!r} is no snapshot name (v and a policy version)")
        versions.append(int(match.group(1)))
    players = [*saved.anchors, *saved.snapshots]
    if len(set(players)) != len(players):
        raise _fail(path, f"anchors and snapshots name a player twice: {players}")
    if set(saved.records) != set(players):
        missing = sorted(set(players) - set(saved.records))
        extra = sorted(set(saved.records) - set(players))
        raise _fail(path, f"records must hold one entry per anchor and snapshot (missing: "
                          f"{', '.join(missing) or 'none'}; not in the pool: {', '.join(extra) or 'none'})")
    last = saved.last_snapshot_version
    if last < max(versions, default=-1):
        raise _fail(path, f"last_snapshot_version {last} is older than the snapshot "
                          f"v{max(versions)} it lists")
    _check_rng(path, saved.rng)
    if limits is None:
        return
    if last > limits.max_version:
        raise _fail(path, f"last_snapshot_version {last} is newer than the run's newest checkpoint "
                          f"{limits.checkpoint} (policy version {limits.max_version})")
    games = sum(r.wins + r.draws + r.losses for r in saved.records.values())
    if games > limits.max_games:
        raise _fail(path, f"records count {games:,} games, more than the {limits.max_games:,} "
                          f"agent-steps the run can have played by {limits.checkpoint}")


def _check_rng(path: Path, rng: list[int]) -> None:
    """The draw generator's state: 624 32-bit words, not all zero, and a position in them."""
    if len(rng) != RNG_WORDS + 1:
        raise _fail(path, f"rng must hold {RNG_WORDS + 1} integers (the draw generator's state), "
                          f"got {len(rng)}")
    bad = next((i for i, w in enumerate(rng[:RNG_WORDS]) if not 0 <= w < 2**32), None)
    if bad is not None:
        raise _fail(path, f"rng[{bad}] must be a 32-bit word (0 to {2**32 - 1}), got {rng[bad]}")
    if not any(rng[:RNG_WORDS]):
        raise _fail(path, "rng holds only zeros (no state of the draw generator)")
    if not 0 <= rng[RNG_WORDS] <= RNG_WORDS:
        raise _fail(path, f"rng[{RNG_WORDS}] is the position in the state, 0 to {RNG_WORDS}, "
                          f"got {rng[RNG_WORDS]}")
