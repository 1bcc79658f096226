"""The env workers' protocol: their control messages and the layout of their shared blocks.

A worker hosts K environments and steps them in a loop, so one message moves K env-steps.
Observations, final observations, rewards, terminated, truncated and actions live in one
shared-memory block per worker (:func:`buffer_layout`), written in place; the pipe carries only
small msgpack-encoded control messages (:func:`pack`, at most :data:`MAX_MESSAGE_BYTES`; the
codec is ``actors/workers/supervision.py``'s). Pickle is used once per start: the env factory
goes in, the spaces come back.

Both ends use this file, and a worker loads it by path (``supervision.spawn_by_path``): it
imports nothing of ours but ``actors.workers.supervision``, and that only as ``from <module>
import <names>`` (which finds a module loaded by path; ``import actors.workers...`` or ``from
actors.workers import ...`` would import the ``actors`` package).
"""

from __future__ import annotations

import sys
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from actors.workers.supervision import ERR
from actors.workers.supervision import pack as encode

MAX_MESSAGE_BYTES = 1 << 20
"""Largest control message either side sends or accepts (1 MiB): infos and ``call`` results
are meant to be small; bulk data belongs in the shared-memory block."""

# Control messages: [op, ...] from the parent, [status, ...] from the worker.
STEP, RESET, CALL, CLOSE, ATTACH = "step", "reset", "call", "close", "attach"
OK = "ok"

__all__ = ["ATTACH", "CALL", "CLOSE", "ERR", "MAX_MESSAGE_BYTES", "OK", "RESET", "STEP"]

_ALIGN = 64  # each array starts on its own cache line


def pack(message: Any) -> bytes:
    """Encode a control message; refuse one above :data:`MAX_MESSAGE_BYTES`."""
    data = encode(message)
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(
            f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit "
            f"(infos, call arguments and results must be small)"
        )
    return data


ArraySpec = tuple[tuple[int, ...], str]
"""(shape of one env's entry, dtype string) of an array in the shared block."""


def buffer_layout(num_envs: int, obs: ArraySpec, action: ArraySpec) -> tuple[dict[str, tuple[int, tuple[int, ...], str]], int]:
    """Where each array of a worker's shared block lies: name -> (byte offset, shape, dtype),
    and the block's size. Both sides compute it from the same specs."""
    fields = {
        "obs": obs, "final_obs": obs, "actions": action,
        "rewards": ((), "<f8"), "terminated": ((), "|b1"), "truncated": ((), "|b1"),
    }
    layout: dict[str, tuple[int, tuple[int, ...], str]] = {}
    offset = 0
    for name, (shape, dtype) in fields.items():
        full = (num_envs, *shape)
        layout[name] = (offset, full, dtype)
        nbytes = int(np.prod(full, dtype=np.int64)) * np.dtype(dtype).itemsize
        offset += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
    return layout, offset


def buffer_views(shm: SharedMemory, layout: dict[str, tuple[int, tuple[int, ...], str]]) -> dict[str, np.ndarray]:
    """NumPy views of a shared block (no copies)."""
    return {
        name: np.ndarray(shape, dtype=np.dtype(dtype), buffer=shm.buf, offset=offset)
        for name, (offset, shape, dtype) in layout.items()
    }


def attach_untracked(name: str) -> SharedMemory:
    """Attach to the parent's block without registering it with the resource tracker.

    The parent created the block and alone unlinks it; a worker that registered it too would
    have the tracker unlink it (or warn about a leak) when the worker exits. Python 3.13 has
    ``track=False``; before that, registration is skipped for the duration of the attach.
    """
    if sys.version_info >= (3, 13):
        return SharedMemory(name=name, track=False)  # type: ignore[call-arg,unused-ignore]
    register = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return SharedMemory(name=name)
    finally:
        resource_tracker.register = register
