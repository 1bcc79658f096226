"""Versioned weight publication from the learner to the actors' policy replicas.

The learner copies its policy's full state (parameters and buffers, e.g. observation
normalisation) into one preallocated flat buffer per dtype and bumps a version; an actor copies
the buffer into its replica before its next chunk when the version moved. Nothing is allocated
after construction.

Ordering: on CUDA the learner's copy is enqueued on its stream and an event recorded; a reader
makes its own stream wait on that event before copying in, and records a reader event that the
next publication waits for before overwriting the buffer. On CPU the copies are plain and a lock
makes each publication and each pull atomic with respect to the other (no torn replicas).

Across processes (``share=True``, CPU actors in worker processes): the flat buffers and a
two-word stamp ``[sequence, version]`` live in shared memory and the publisher pickles into
spawned processes (torch passes the segments' file descriptors). A publication is a seqlock
write: the sequence turns odd, the buffers and the version are written, the sequence turns even.
A reader copies only between two equal, even readings of the sequence and retries otherwise, so
a replica never mixes two publications and always carries the version it was published with.
One writer (the learner), any number of readers, and no reader ever blocks the writer. The
ordering relies on stores becoming visible in program order (x86-64's TSO); every read and write
of the stamp is one aligned 8-byte access.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
from torch import nn

from actors.protocol import Replica


class WeightPublisher:
    """A module's state in preallocated flat buffers, with a publication version."""

    def __init__(self, module: nn.Module, device: torch.device | str | None = None, share: bool = False):
        state = module.state_dict()
        if not state:
            raise ValueError("module has no state to publish")
        first = next(iter(state.values()))
        self.device = torch.device(device) if device is not None else first.device
        self.names = list(state)
        self.shapes = {k: tuple(v.shape) for k, v in state.items()}
        sizes: dict[torch.dtype, int] = {}
        offsets: dict[str, tuple[torch.dtype, int, int]] = {}
        for name, t in state.items():
            start = sizes.get(t.dtype, 0)
            offsets[name] = (t.dtype, start, t.numel())
            sizes[t.dtype] = start + t.numel()
        if share and self.device.type != "cpu":
            raise ValueError(f"a shared publisher lives in host memory, got device {self.device}")
        self.shared = share
        """Buffers and stamp in shared memory, readable from spawned processes (seqlock)."""
        self._flat = {dt: torch.zeros(n, dtype=dt, device=self.device) for dt, n in sizes.items()}
        self._stamp = torch.tensor([0, -1], dtype=torch.int64)
        """``[sequence, version]``: the sequence is odd while a publication is being written."""
        if share:
            for t in (*self._flat.values(), self._stamp):
                t.share_memory_()
        self._views = {
            name: self._flat[dt][start : start + n].view(self.shapes[name])
            for name, (dt, start, n) in offsets.items()
        }
        self._version = -1
        self._lock = threading.Lock()
        cuda = self.device.type == "cuda"
        self._published = torch.cuda.Event() if cuda else None
        self._reader_events: dict[int, torch.cuda.Event] = {}

    @property
    def version(self) -> int:
        """The latest published version (-1 until the first publication)."""
        return int(self._stamp[1]) if self.shared else self._version

    def __getstate__(self) -> dict[str, Any]:
        if not self.shared:
            raise TypeError("only a WeightPublisher made with share=True can be sent to another process")
        state = dict(self.__dict__)
        del state["_lock"]  # the cross-process guard is the seqlock; a lock per process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Bytes of the flat buffers."""
        return sum(t.numel() * t.element_size() for t in self._flat.values())

    def _check(self, state: dict[str, torch.Tensor], who: str) -> None:
        if list(state) != self.names:
            missing = sorted(set(self.names) - set(state))
            extra = sorted(set(state) - set(self.names))
            raise ValueError(f"{who} state does not match the published one: missing {missing}, extra {extra}")
        for name, t in state.items():
            if tuple(t.shape) != self.shapes[name]:
                raise ValueError(
                    f"{who} state {name!r} has shape {tuple(t.shape)}, published {self.shapes[name]}"
                )

    @torch.no_grad()
    def publish(self, module: nn.Module, version: int, stream: torch.cuda.Stream | None = None) -> None:
        """Copy ``module``'s state into the buffer and set the version (enqueued on ``stream``)."""
        state = module.state_dict()
        self._check(state, "publisher")
        with self._lock:
            if self._published is not None:
                stream = stream or torch.cuda.current_stream(self.device)
                for ev in self._reader_events.values():
                    stream.wait_event(ev)  # a reader's copy out must finish before we overwrite
                with torch.cuda.stream(stream):
                    for name in self.names:
                        self._views[name].copy_(state[name], non_blocking=True)
                    self._published.record(stream)
            elif self.shared:
                seq = int(self._stamp[0])
                self._stamp[0] = seq + 1  # odd: readers keep off
                for name in self.names:
                    self._views[name].copy_(state[name])
                self._stamp[1] = int(version)
                self._stamp[0] = seq + 2
            else:
                for name in self.names:
                    self._views[name].copy_(state[name])
            self._version = int(version)

    @torch.no_grad()
    def pull(
        self,
        module: Replica,
        local_version: int,
        reader_id: int = 0,
        stream: torch.cuda.Stream | None = None,
    ) -> int:
        """Copy the published state into ``module`` if newer than ``local_version``.

        Returns the version the module now holds. On CUDA the copy is enqueued on ``stream``
        after the publication's event; the host never waits.
        """
        if self.version <= local_version:  # a plain int read: cheap check without the lock
            return local_version
        state = module.state_dict()
        self._check(state, "replica")
        if self.shared:
            return self._pull_seqlock(state, local_version)
        with self._lock:
            target = next(iter(state.values())).device
            if self._published is not None or target.type == "cuda":
                stream = stream or torch.cuda.current_stream(
                    target if target.type == "cuda" else self.device
                )
                if self._published is not None:
                    stream.wait_event(self._published)
                with torch.cuda.stream(stream):
                    for name in self.names:
                        state[name].copy_(self._views[name], non_blocking=True)
                    ev = self._reader_events.get(reader_id) or torch.cuda.Event()
                    ev.record(stream)
                    self._reader_events[reader_id] = ev
            else:
                for name in self.names:
                    state[name].copy_(self._views[name])
            return self.version

    def _pull_seqlock(self, state: dict[str, torch.Tensor], local_version: int) -> int:
        """Copy the published state between two equal even sequence readings (retrying while
        a publication is being written); returns the version of what was copied."""
        while True:
            seq = int(self._stamp[0])
            if seq % 2:
                time.sleep(0)  # a publication is being written: let the writer finish
                continue
            version = int(self._stamp[1])
            if version <= local_version:
                return local_version
            for name in self.names:
                state[name].copy_(self._views[name])
            if int(self._stamp[0]) == seq:
                return version
