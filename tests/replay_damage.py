"""Crafted replay files for the hostile-input tests: every kind of damage made from one real
recorded replay, deterministically (a seeded generator picks the flipped bytes).

:func:`crafted_replays` gives ``name -> file bytes``. Each case changes one thing of the real
file: a header field missing or of the wrong type, a block's count or arrays, non-finite
numbers, events of the wrong shape, the end record, the file cut at every section, flipped
bytes, escape sequences in the names, many empty blocks, huge claimed lengths.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import torch

from pipeline.evaluate import main as evaluate_main

Objects = list[dict[str, Any]]
"""A replay as its msgpack objects: header, blocks, end record."""

WRONG_VALUES: dict[str, object] = {
    "list": [1, 2], "int": 7, "str": "x", "none": None, "nan": math.nan, "map": {"a": 1},
    "bool": True, "neg": -3,
}
"""One value of each wrong type, tried in every header field."""

HEADER_FIELDS = ("format", "version", "sim_config", "agents", "seed", "scenario", "env_index", "episode",
                 "missiles_per_fighter", "decision_dt_s", "created_utc", "fields")


def split(data: bytes) -> Objects:
    """The msgpack objects of a replay file."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    return list(unpacker)


def join(objs: list[Any]) -> bytes:
    """Objects back into file bytes."""
    return b"".join(msgpack.packb(o, use_bin_type=True) for o in objs)


def _edit(change: Callable[[Objects], object]) -> Callable[[Objects], bytes]:
    def make(objs: Objects) -> bytes:
        objs = copy.deepcopy(objs)
        change(objs)
        return join(objs)
    return make


def _array(objs: Objects, name: str, dtype: str, fill: Callable[[np.ndarray], None]) -> None:
    block = objs[1]
    a = np.frombuffer(block["arrays"][name], dtype=dtype).copy()
    fill(a)
    block["arrays"][name] = a.tobytes()


def _set(path: tuple[Any, ...], value: object) -> Callable[[Objects], bytes]:
    def change(objs: Objects) -> None:
        target: Any = objs
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return _edit(change)


def _drop(path: tuple[Any, ...]) -> Callable[[Objects], bytes]:
    def change(objs: Objects) -> None:
        target: Any = objs
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return _edit(change)


def _events(change: Callable[[list[Any]], object]) -> Callable[[Objects], bytes]:
    return _edit(lambda objs: change(objs[1]["events"]))


def _fill(name: str, dtype: str, value: float | int, where: slice = slice(0, 4)) -> Callable[[Objects], bytes]:
    def put(a: np.ndarray) -> None:
        a[where] = value
    return _edit(lambda objs: _array(objs, name, dtype, put))


def _empty_blocks(count: int) -> Callable[[Objects], bytes]:
    def make(objs: Objects) -> bytes:
        empty = {"type": "frames", "count": 0, "arrays": {k: b"" for k in objs[1]["arrays"]}, "events": []}
        return join([objs[0], *([empty] * count), *objs[1:]])
    return make


def _huge_bin(objs: Objects) -> bytes:
    """A block whose one binary claims 2**31 bytes (the file holds a few)."""
    head = join(objs[:1])
    return head + b"\x81\xa4type\xc6\x80\x00\x00\x00" + b"\x00" * 64


def _deep(objs: Objects) -> bytes:
    """An object nested 100 000 lists deep after the header."""
    return join(objs[:1]) + b"\x91" * 100_000 + b"\xc0"


def _many_nils(objs: Objects) -> bytes:
    """An array that claims 2**32 - 1 items after the header."""
    return join(objs[:1]) + b"\xdd\xff\xff\xff\xff" + b"\xc0" * 1000


def _list_key(objs: Objects) -> bytes:
    """After the header, a map whose key is a list (unhashable: msgpack raises TypeError); one
    flipped byte made such a map in the seeded flips once."""
    return join(objs[:1]) + b"\x81\x91\x01\x01" + join(objs[1:])


CASES: dict[str, Callable[[Objects], bytes]] = {
    "map-key-list": _list_key,
    # The findings of the issue, one by one.
    "agents-list": _set((0, "agents"), ["shooter", "pursuit"]),
    "outcome-int": _set((2, "outcome"), 3),
    "winner-int": _set((2, "outcome", "winner"), 1),
    "event-string": _events(lambda ev: ev.append("launch")),
    "event-no-t": _events(lambda ev: ev[0].pop("t_s")),
    "no-sim-config": _drop((0, "sim_config")),
    "sim-config-string": _set((0, "sim_config"), "default"),
    "positions-inf": _fill("f_x", "float32", math.inf),
    "positions-nan": _fill("f_y", "float32", math.nan),
    "missile-positions-inf": _fill("m_x", "float32", -math.inf, slice(0, 30)),
    "dt-zero": _set((0, "decision_dt_s"), 0.0),
    "dt-negative": _set((0, "decision_dt_s"), -0.5),
    "dt-inf": _set((0, "decision_dt_s"), math.inf),
    "dt-nan": _set((0, "decision_dt_s"), math.nan),
    "sim-dt-zero": _set((0, "sim_config", "dt_s"), 0.0),
    "sim-dt-string": _set((0, "sim_config", "dt_s"), "fast"),
    "sim-unknown-field-only": _set((0, "sim_config"), {"warp": 9}),
    "escape-names": _set((0, "agents"), {"red": "\x1b[2J\x1b[31mred\x07", "blue": "a\nb\rc\x00$\\frac{1}{"}),
    "name-int": _set((0, "agents", "red"), 12),
    "agents-missing-blue": _drop((0, "agents", "blue")),
    "missiles-zero": _set((0, "missiles_per_fighter"), 0),
    "missiles-huge": _set((0, "missiles_per_fighter"), 10**9),
    "missiles-mismatch": _set((0, "missiles_per_fighter"), 5),
    "version-newer-major": _set((0, "version"), [2, 0]),
    "version-newer-minor": _set((0, "version"), [1, 7]),
    "version-string": _set((0, "version"), "1.0"),
    "format-other": _set((0, "format"), "other"),
    "fields-wrong-shape": _set((0, "fields", "f_x"), ["float32", [3]]),
    "fields-wrong-dtype": _set((0, "fields", "t_s"), ["int8", []]),
    # Blocks.
    "count-string": _set((1, "count"), "46"),
    "count-negative": _set((1, "count"), -1),
    "count-huge": _set((1, "count"), 2**40),
    "count-mismatch": _set((1, "count"), 45),
    "arrays-list": _set((1, "arrays"), []),
    "array-missing": _drop((1, "arrays", "m_x")),
    "array-short": _edit(lambda objs: objs[1]["arrays"].__setitem__("f_x", objs[1]["arrays"]["f_x"][:-4])),
    "array-string": _set((1, "arrays", "t_s"), "0.0"),
    "time-nan": _fill("t_s", "float64", math.nan, slice(3, 4)),
    "time-inf": _fill("t_s", "float64", math.inf, slice(-1, None)),
    "time-backwards": _fill("t_s", "float64", -5.0, slice(10, 11)),
    "velocity-nan": _fill("f_vx", "float32", math.nan),
    "rudder-inf": _fill("m_rudder", "float32", math.inf),
    "positions-huge": _fill("f_x", "float32", 3e38),
    "missile-id-huge": _fill("m_id", "int32", 2**31 - 1, slice(0, 200)),
    "missile-id-negative": _fill("m_id", "int32", -7, slice(0, 200)),
    "alive-byte-2": _fill("f_alive", "uint8", 2),
    "active-byte-255": _fill("m_active", "uint8", 255, slice(0, 100)),
    "target-7": _fill("m_target", "int8", 7),
    "ammo-negative": _fill("f_ammo", "int16", -3),
    "decision-negative": _fill("decision", "int32", -1),
    "events-map": _set((1, "events"), {"kind": "launch"}),
    "events-none": _set((1, "events"), None),
    "event-no-kind": _events(lambda ev: ev[0].pop("kind")),
    "event-kind-unknown": _events(lambda ev: ev[0].__setitem__("kind", "teleport")),
    "event-kind-int": _events(lambda ev: ev[0].__setitem__("kind", 4)),
    "event-t-string": _events(lambda ev: ev[0].__setitem__("t_s", "soon")),
    "event-t-nan": _events(lambda ev: ev[0].__setitem__("t_s", math.nan)),
    "event-no-frame": _events(lambda ev: ev[0].pop("frame")),
    "event-frame-out": _events(lambda ev: ev[0].__setitem__("frame", 10**6)),
    "event-frame-negative": _events(lambda ev: ev[0].__setitem__("frame", -1)),
    "event-side-5": _events(lambda ev: ev[0].__setitem__("side", 5)),
    "event-side-string": _events(lambda ev: ev[0].__setitem__("side", "red")),
    "event-missile-string": _events(lambda ev: ev[1].__setitem__("missile", "m0")),
    "event-missile-huge": _events(lambda ev: ev[1].__setitem__("missile", 2**63)),
    "event-slot-out": _events(lambda ev: ev[0].__setitem__("slot", 99)),
    "event-target-none": _events(lambda ev: ev[1].__setitem__("target", None)),
    "event-reason-unknown": _events(lambda ev: ev[2].__setitem__("reason", "bored")),
    "event-kill-by-list": _events(lambda ev: ev[3].__setitem__("by", [0])),
    "event-end-winner-int": _events(lambda ev: ev[4].__setitem__("winner", 0)),
    "event-end-reason-unknown": _events(lambda ev: ev[4].__setitem__("end_reason", "boredom")),
    "events-many": _events(lambda ev: ev.extend([dict(ev[0])] * 5000)),
    "block-not-map": _edit(lambda objs: objs.insert(1, [1, 2, 3])),
    "block-type-int": _edit(lambda objs: objs.insert(1, {"type": 5})),
    "block-unknown-type": _edit(lambda objs: objs.insert(1, {"type": "comment", "text": "hi"})),
    # The end record.
    "end-missing-outcome": _drop((2, "outcome")),
    "end-outcome-list": _set((2, "outcome"), ["red"]),
    "end-winner-unknown": _set((2, "outcome", "winner"), "green"),
    "end-reason-unknown": _set((2, "outcome", "end_reason"), "boredom"),
    "end-reason-int": _set((2, "outcome", "end_reason"), 2),
    "end-t-nan": _set((2, "outcome", "t_s"), math.nan),
    "end-t-string": _set((2, "outcome", "t_s"), "late"),
    "end-decisions-string": _set((2, "outcome", "decisions"), "45"),
    "end-frames-string": _set((2, "frames"), "46"),
    "end-frames-wrong": _set((2, "frames"), 99),
    "end-twice": _edit(lambda objs: objs.append(dict(objs[2]))),
    "trailing-garbage": lambda objs: join(objs) + b"\x00garbage",
    # Structure and size.
    "empty-file": lambda objs: b"",
    "not-msgpack": lambda objs: b"hello, world\n" * 10,
    "header-only": lambda objs: join(objs[:1]),
    "no-blocks": lambda objs: join([objs[0], {"type": "end", "frames": 0, "outcome": objs[2]["outcome"]}]),
    "empty-blocks-2000": _empty_blocks(2000),
    "huge-bin-claim": _huge_bin,
    "deep-nesting": _deep,
    "many-nils-claim": _many_nils,
    "header-is-list": lambda objs: join([[1, 2], *objs[1:]]),
}
for _field in HEADER_FIELDS:
    CASES[f"header-missing-{_field}"] = _drop((0, _field))
    for _kind, _value in WRONG_VALUES.items():
        CASES[f"header-{_field}-{_kind}"] = _set((0, _field), _value)


def record_fight(folder: Path, agent: str = "shooter", opponent: str = "pursuit", episodes: int = 2) -> Path:
    """Record a head-on fight of ``agent`` (red) against ``opponent`` into ``folder`` (shooter
    against pursuit: a launch, a hit and a kill); returns the replay's path."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        evaluate_main(["--agent", agent, "--opponents", opponent, "--episodes", str(episodes),
                       "--scenario", "head_on", "--record", str(folder), "--record-episodes", "1"])
    finally:
        torch.set_num_threads(before)
    (path,) = folder.glob("*.replay")
    return path


FLIPS = 40
"""Files with seeded flipped bytes among the crafted ones."""


def crafted_replays(real: bytes, seed: int = 28, flips: int = FLIPS) -> dict[str, bytes]:
    """Every crafted file made from the real replay ``real``: the cases of :data:`CASES`, the
    file cut at the start, middle and end of every object, and ``flips`` files with one to
    three seeded bytes flipped."""
    objs = split(real)
    out = {name: make(objs) for name, make in CASES.items()}
    starts = np.cumsum([0] + [len(join([o])) for o in objs])
    for k, (a, b) in enumerate(itertools.pairwise(starts)):
        for where, cut in (("start", a + 1), ("middle", (a + b) // 2), ("end", b - 1)):
            out[f"cut-object{k}-{where}"] = real[:cut]
    rng = np.random.default_rng(seed)
    for k in range(flips):
        data = bytearray(real)
        for pos in rng.integers(0, len(data), size=int(rng.integers(1, 4))):
            data[pos] ^= int(rng.integers(1, 256))
        out[f"flip-{k:02d}"] = bytes(data)
    return out
