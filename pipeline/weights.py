"""Versioned weight publication from the learner to the actors' policy replicas.

The learner copies its policy's full state (parameters and buffers, e.g. observation
normalisation) into one preallocated flat buffer per dtype and bumps a version; an actor copies
the buffer into its replica before its next chunk when the version moved. Nothing is allocated
after construction.

Ordering: on CUDA the learner's copy is enqueued on its stream and an event recorded; a reader
makes its own stream wait on that event before copying in, and records a reader event that the
next publication waits for before overwriting the buffer. On CPU the copies are plain and a lock
makes each publication and each pull atomic with respect to the other (no torn replicas).
"""

from __future__ import annotations

import threading

import torch
from torch import nn


class WeightPublisher:
    """A module's state in preallocated flat buffers, with a publication version."""

    def __init__(self, module: nn.Module, device: torch.device | str | None = None):
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
        self._flat = {dt: torch.zeros(n, dtype=dt, device=self.device) for dt, n in sizes.items()}
        self._views = {
            name: self._flat[dt][start : start + n].view(self.shapes[name])
            for name, (dt, start, n) in offsets.items()
        }
        self.version = -1
        """-1 until the first publication."""
        self._lock = threading.Lock()
        cuda = self.device.type == "cuda"
        self._published = torch.cuda.Event() if cuda else None
        self._reader_events: dict[int, torch.cuda.Event] = {}

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
            else:
                for name in self.names:
                    self._views[name].copy_(state[name])
            self.version = int(version)

    @torch.no_grad()
    def pull(
        self,
        module: nn.Module,
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
