"""The replay file: one recorded episode of one environment, streamed as msgpack.

A replay is a sequence of msgpack objects (maps), written one after another:

1. the **header**: ``{"format": "midrange-replay", "version": [MAJOR, MINOR], ...}`` with the
   sim config (``SimConfig.to_dict()``), the agents (red, blue), the seed, the scenario, the
   environment index and episode number, and ``fields``: name -> ``[dtype, per-frame shape]``
   of every frame array;
2. any number of **blocks** ``{"type": "frames", "count": n, "arrays": {name: bytes}, "events":
   [...]}``: ``n`` consecutive frames (one per decision step, the first at the episode's start)
   and the events that happened in them. A writer never holds more than one block, so a long
   episode never sits whole in memory;
3. the **end record** ``{"type": "end", "frames": total, "outcome": {...}}``.

The file is written under a temporary name (``.NAME.<pid>.tmp``) and renamed at :meth:`close`,
so a replay on disk is whole. A reader refuses, with a :class:`ReplayError` saying which: a file
that is not a replay, a newer major version, a file cut short (no end record, or half an
object at the end), and any header, block, event or end record that breaks the format
(:mod:`sim.replay.checks`: types, shapes, finite values, limits that bound memory). A newer
minor version is read (unknown keys, arrays, record types and event kinds are ignored).

Frame arrays (``F`` frames, ``M`` missile slots per side; side 0 red, 1 blue; x east, y north):

=================  =========  ===========  ==================================================
name               dtype      shape        meaning
=================  =========  ===========  ==================================================
``t_s``            float64    ``[F]``      sim time since the episode's start, s
``decision``       int32      ``[F]``      decision steps since the start (0 for the start)
``f_x, f_y``       float32    ``[F, 2]``   fighter position, m
``f_vx, f_vy``     float32    ``[F, 2]``   fighter velocity, m/s
``f_throttle``     float32    ``[F, 2]``   throttle in [0, 1]
``f_rudder``       float32    ``[F, 2]``   rudder in [-1, 1] (positive turns left)
``f_alive``        bool       ``[F, 2]``
``f_ammo``         int16      ``[F, 2]``   missiles left
``m_active``       bool       ``[F, 2, M]`` the slot holds a missile in flight
``m_id``           int32      ``[F, 2, M]`` the missile's number in the episode (-1: none);
                                           one number per launch, so reused slots differ
``m_x, m_y``       float32    ``[F, 2, M]`` missile position, m (kept after it is gone)
``m_vx, m_vy``     float32    ``[F, 2, M]`` missile velocity, m/s
``m_rudder``       float32    ``[F, 2, M]`` guidance command in [-1, 1]
``m_flight_s``     float32    ``[F, 2, M]`` flight time, s
``m_burn_left_s``  float32    ``[F, 2, M]`` motor burn time left (the fuel), s
``m_target``       int8       ``[F, 2, M]`` the fighter it guides on (the other side)
=================  =========  ===========  ==================================================

Events are maps with ``t_s``, ``frame`` (the index of the first frame that shows it) and
``kind``: ``launch`` (side, slot, missile), ``missile_lost`` (side, slot, missile, reason:
``hit``, ``target_gone``, ``too_slow``, ``max_flight_time``, ``replaced``), ``hit`` (side of
the shooter, missile, target), ``kill`` (side destroyed, by), ``out_of_arena`` (side),
``time_limit``, ``ammo_out``, and ``end`` (winner, end_reason). The end record's ``outcome``
holds ``winner`` (``red``, ``blue`` or ``draw``), ``end_reason`` (see ``sim.END_REASONS``),
``t_s`` and ``decisions``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgpack
import numpy as np

from core.files import AtomicFile
from sim.replay.checks import (
    EVENT_FIELDS,
    MAX_FRAME_BYTES,
    MAX_MISSILE_SLOTS,
    MAX_OBJECT_BYTES,
    check_arrays,
    check_end,
    check_event,
    check_header,
    max_events,
    max_frames,
)
from sim.replay.episode import MissilePath, Replay, printable

__all__ = ["FORMAT_NAME", "VERSION", "MissilePath", "Replay", "ReplayError", "ReplayReader", "ReplayWriter",
           "frame_shapes", "load_replay", "read_header"]

FORMAT_NAME = "midrange-replay"
VERSION = (1, 0)
"""(major, minor): a reader reads every minor version of its major version."""

FRAME_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "t_s": ("float64", ()),
    "decision": ("int32", ()),
    "f_x": ("float32", ("side",)),
    "f_y": ("float32", ("side",)),
    "f_vx": ("float32", ("side",)),
    "f_vy": ("float32", ("side",)),
    "f_throttle": ("float32", ("side",)),
    "f_rudder": ("float32", ("side",)),
    "f_alive": ("bool", ("side",)),
    "f_ammo": ("int16", ("side",)),
    "m_active": ("bool", ("side", "slot")),
    "m_id": ("int32", ("side", "slot")),
    "m_x": ("float32", ("side", "slot")),
    "m_y": ("float32", ("side", "slot")),
    "m_vx": ("float32", ("side", "slot")),
    "m_vy": ("float32", ("side", "slot")),
    "m_rudder": ("float32", ("side", "slot")),
    "m_flight_s": ("float32", ("side", "slot")),
    "m_burn_left_s": ("float32", ("side", "slot")),
    "m_target": ("int8", ("side", "slot")),
}
"""Every frame array: dtype and per-frame dimensions (``side`` = 2, ``slot`` = M)."""


class ReplayError(ValueError):
    """A file that cannot be read as a replay; the message says why and names the file."""


def frame_shapes(missiles_per_fighter: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Name -> (dtype, per-frame shape) for ``missiles_per_fighter`` slots per side."""
    sizes = {"side": 2, "slot": missiles_per_fighter}
    return {k: (dt, tuple(sizes[d] for d in dims)) for k, (dt, dims) in FRAME_FIELDS.items()}


@dataclass
class _Block:
    arrays: dict[str, np.ndarray]
    events: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------------------------- writing


class ReplayWriter:
    """Streams one episode into ``path`` (see the module docstring); use as a context manager
    or call :meth:`close`. :meth:`abort` (or an exception inside ``with``) leaves no file."""

    def __init__(self, path: str | Path, header: dict[str, Any]) -> None:
        self.path = Path(path)
        m = header.get("missiles_per_fighter")
        if not isinstance(m, int) or m < 1:
            raise ValueError(f"header needs missiles_per_fighter >= 1, got {m!r}")
        self._shapes = frame_shapes(m)
        self._frames = 0
        self._file: AtomicFile | None = AtomicFile(self.path)  # committed in close()
        self._packer = msgpack.Packer(use_bin_type=True)
        full = {
            "format": FORMAT_NAME, "version": list(VERSION), **header,
            "fields": {k: [dt, list(shape)] for k, (dt, shape) in self._shapes.items()},
        }
        self._write(full)

    @property
    def frames_written(self) -> int:
        return self._frames

    def _write(self, obj: dict[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"replay {self.path} is already closed")
        self._file.handle.write(self._packer.pack(obj))

    def write_frames(self, arrays: dict[str, np.ndarray], events: list[dict[str, Any]] | None = None) -> None:
        """Append ``n`` frames (every field of the format, each ``[n, ...]``) and their events."""
        n = int(np.asarray(arrays["t_s"]).shape[0])
        packed: dict[str, bytes] = {}
        for name, (dtype, shape) in self._shapes.items():
            if name not in arrays:
                raise ValueError(f"write_frames: missing frame array {name!r}")
            a = np.ascontiguousarray(arrays[name], dtype=dtype)
            if a.shape != (n, *shape):
                raise ValueError(f"write_frames: {name} must have shape {(n, *shape)}, got {a.shape}")
            packed[name] = a.tobytes()
        block = self._packer.pack({"type": "frames", "count": n, "arrays": packed, "events": list(events or [])})
        if len(block) > MAX_OBJECT_BYTES:
            raise ValueError(f"write_frames: a block of {n} frames takes {len(block)} bytes, more than the "
                             f"{MAX_OBJECT_BYTES >> 20} MiB a reader reads: write fewer frames at a time")
        if self._file is None:
            raise ValueError(f"replay {self.path} is already closed")
        self._file.handle.write(block)
        self._frames += n

    def close(self, outcome: dict[str, Any]) -> Path:
        """Write the end record, flush, fsync and move the file into place; returns its path."""
        if self._file is None:
            raise ValueError(f"replay {self.path} is already closed")
        try:
            self._write({"type": "end", "frames": self._frames, "outcome": outcome})
            self._file.commit()
        except BaseException:
            self.abort()
            raise
        self._file = None
        return self.path

    def abort(self) -> None:
        """Give the episode up: close and remove the temporary file."""
        if self._file is not None:
            self._file.abort()
            self._file = None

    def __enter__(self) -> ReplayWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None or self._file is not None:
            self.abort()


# ---------------------------------------------------------------------------------- reading


class ReplayReader:
    """Reads a replay as a stream. ``with ReplayReader(path) as r:`` then ``r.header``,
    ``r.config``, ``for frame in r.frames()`` (one dict of arrays per frame), or ``r.blocks()``;
    the events and outcome are known once the stream has been read (``r.events``,
    ``r.outcome``).

    The header is checked at opening, each block and the end record as they are reached
    (:mod:`sim.replay.checks`), so a damaged or truncated file raises :class:`ReplayError` from
    the iterator, after its whole frames. Blocks without frames are skipped; one object larger
    than :data:`~sim.replay.checks.MAX_OBJECT_BYTES` is refused, so memory stays bounded.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._file: IO[bytes] = open(self.path, "rb")  # closed in close()
        except OSError as exc:
            raise ReplayError(f"cannot open replay {self.path}: {(exc.strerror or str(exc)).lower()}") from None
        self._size = os.fstat(self._file.fileno()).st_size
        self._unpacker = msgpack.Unpacker(self._file, raw=False, strict_map_key=False,
                                          max_buffer_size=MAX_OBJECT_BYTES, max_array_len=1 << 16,
                                          max_map_len=1 << 12)
        self.events: list[dict[str, Any]] = []
        self.outcome: dict[str, Any] | None = None
        self._frames = 0
        self._blocks = 0
        self._last_t_s = 0.0
        try:
            self.header = self._check_header(self._next("its header"))
        except BaseException:
            self.close()
            raise
        m = self.header["missiles_per_fighter"]
        self.shapes = frame_shapes(m)
        self._max_frames = min(max_frames(self.config),
                               MAX_FRAME_BYTES // sum(_frame_bytes(dt, sh) for dt, sh in self.shapes.values()))

    def _error(self, why: str) -> ReplayError:
        return ReplayError(printable(f"{self.path}: {why}", limit=2000))

    def _next(self, what: str) -> Any:
        try:
            return self._unpacker.unpack()
        except msgpack.OutOfData:
            raise self._error(f"truncated: the file ends before {what} ({self._size} bytes, "
                              f"{self._frames} whole frames); the writer was interrupted") from None
        except msgpack.BufferFull:
            raise self._error(f"{what}: an object larger than {MAX_OBJECT_BYTES >> 20} MiB (a block "
                              "holds at most that)") from None
        except (ValueError, TypeError, msgpack.UnpackException, msgpack.ExtraData, RecursionError) as exc:
            # TypeError: a damaged byte can make a map's key a list or a map (unhashable).
            raise self._error(f"not a readable replay, at {what} ({type(exc).__name__}: {exc})") from None

    def _check_header(self, obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict) or obj.get("format") != FORMAT_NAME:
            raise self._error(f"not a replay file (no {FORMAT_NAME!r} header)")
        version = obj.get("version")
        if not (isinstance(version, list) and len(version) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in version)):
            raise self._error(f"bad format version {version!r}")
        if version[0] > VERSION[0]:
            raise self._error(
                f"written in replay format {version[0]}.{version[1]}, newer than this reader "
                f"({VERSION[0]}.{VERSION[1]}): update midrange-rl to read it")
        if version[0] < VERSION[0]:
            raise self._error(f"replay format {version[0]}.{version[1]} is older than this reader "
                              f"reads ({VERSION[0]}.x)")
        self._newer_minor = version[1] > VERSION[1]
        m = obj.get("missiles_per_fighter")
        if not isinstance(m, int) or isinstance(m, bool) or not 1 <= m <= MAX_MISSILE_SLOTS:
            raise self._error(f"header: missiles_per_fighter must be an integer in 1..{MAX_MISSILE_SLOTS}, "
                              f"got {m!r}")
        try:
            self.config = check_header(obj, frame_shapes(m))
        except ValueError as exc:
            raise self._error(f"header: {exc}") from None
        return obj

    def blocks(self) -> Iterator[tuple[dict[str, np.ndarray], list[dict[str, Any]]]]:
        """Each block's frame arrays (``[n, ...]``) and events, in order; checks the end."""
        while True:
            obj = self._next(f"its end record (after {self._frames} frames)")
            self._blocks += 1
            kind = obj.get("type") if isinstance(obj, dict) else None
            if kind == "end":
                try:
                    self.outcome = check_end(obj, self._frames)
                except ValueError as exc:
                    raise self._error(f"end record: {exc}") from None
                if self._unpacker.tell() != self._size:
                    raise self._error(f"{self._size - self._unpacker.tell()} bytes after the end record")
                return
            if not isinstance(kind, str):
                raise self._error(f"block {self._blocks}: not a record (a mapping with a type), after "
                                  f"{self._frames} frames")
            if kind != "frames":
                continue  # a record type of a newer minor version
            if obj.get("count") == 0 and not obj.get("events") and isinstance(obj.get("arrays"), dict):
                continue  # no frames: nothing to check or keep
            try:
                block = self._decode(obj)
            except ValueError as exc:
                raise self._error(f"block {self._blocks}: {exc}") from None
            self._frames += int(obj["count"])
            self.events.extend(block.events)
            yield block.arrays, block.events

    def _decode(self, obj: dict[str, Any]) -> _Block:
        n = obj.get("count")
        raw = obj.get("arrays")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"count must be an integer >= 0, got {n!r}")
        if self._frames + n > self._max_frames:
            raise ValueError(f"{self._frames + n} frames, more than the {self._max_frames} a replay of "
                             f"this sim_config holds (one per decision and the start, at most "
                             f"{MAX_FRAME_BYTES >> 20} MiB)")
        if not isinstance(raw, dict):
            raise ValueError(f"arrays must be a mapping of frame arrays, got {type(raw).__name__}")
        events = obj.get("events", [])
        if not isinstance(events, list):
            raise ValueError(f"events must be a list, got {type(events).__name__}")
        if len(self.events) + len(events) > max_events(self.header["missiles_per_fighter"]):
            raise ValueError(f"{len(self.events) + len(events)} events, more than a fight of "
                             f"{self.header['missiles_per_fighter']} missiles a side holds "
                             f"({max_events(self.header['missiles_per_fighter'])})")
        arrays = {}
        for name, (dtype, shape) in self.shapes.items():
            data = raw.get(name)
            expected = n * _frame_bytes(dtype, shape)
            if not isinstance(data, bytes) or len(data) != expected:
                raise ValueError(f"{name} has {len(data) if isinstance(data, bytes) else 'no'} bytes, "
                                 f"expected {expected} ({n} frames)")
            arrays[name] = np.frombuffer(data, dtype=dtype).reshape(n, *shape)
        m = self.header["missiles_per_fighter"]
        check_arrays(arrays, m, self._last_t_s)
        if n:
            self._last_t_s = float(arrays["t_s"][-1])
        kept = [e for e in events if check_event(e, m, self._frames, n)]
        if len(kept) < len(events) and not self._newer_minor:
            unknown = next(e for e in events if e not in kept)
            raise ValueError(f"an event of unknown kind {unknown.get('kind')!r} (known: "
                             f"{', '.join(EVENT_FIELDS)})")
        return _Block(arrays, kept)

    def frames(self) -> Iterator[dict[str, np.ndarray]]:
        """One dict of arrays per frame (views into its block), in order."""
        for arrays, _ in self.blocks():
            n = arrays["t_s"].shape[0]
            for i in range(n):
                yield {k: v[i] for k, v in arrays.items()}

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ReplayReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _frame_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def read_header(path: str | Path) -> dict[str, Any]:
    """The header of a replay (checked, without reading the frames)."""
    with ReplayReader(path) as reader:
        return reader.header


def load_replay(path: str | Path) -> Replay:
    """Read a whole replay into arrays (``Replay.arrays[name]`` is ``[F, ...]``)."""
    with ReplayReader(path) as reader:
        parts: dict[str, list[np.ndarray]] = {k: [] for k in reader.shapes}
        for arrays, _ in reader.blocks():
            for k, v in arrays.items():
                parts[k].append(v)
        joined = {
            k: (np.concatenate(v) if v else np.zeros((0, *reader.shapes[k][1]), dtype=reader.shapes[k][0]))
            for k, v in parts.items()
        }
        if joined["t_s"].shape[0] == 0:
            raise ReplayError(f"{path}: the replay holds no frames")
        return Replay(reader.header, joined, reader.events, reader.outcome or {}, reader.config, Path(path))
