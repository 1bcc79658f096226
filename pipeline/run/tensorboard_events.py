"""TensorBoard event files written in the run's own thread, each event appended whole.

TensorBoard's ``SummaryWriter`` writes from a thread of its own, where a full disk becomes a
traceback on stderr and a half-written record; here every event is one
:func:`pipeline.run.outputs.append_whole`, so a full disk raises ``OSError`` naming the event file
at the call that met it and the file keeps only whole records.
"""

from __future__ import annotations

import io
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from pipeline.run.outputs import append_whole


class EventFile:
    """One ``events.out.tfevents.*`` file in ``directory`` (created if missing), named as
    TensorBoard's own writer names it."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        now = time.time()
        self.path = directory / f"events.out.tfevents.{int(now):010d}.{socket.gethostname()}.{os.getpid()}.0"
        from tensorboard.compat.proto.event_pb2 import Event

        self._write(Event(wall_time=now, file_version="brain.Event:2"))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """One event holding every ``tag: value`` of ``values`` at ``step``."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=tag, simple_value=v) for tag, v in values.items()])
        self._write(Event(wall_time=time.time(), step=step, summary=summary))

    def _write(self, event: object) -> None:
        from tensorboard.summary.writer.record_writer import RecordWriter

        record = io.BytesIO()
        RecordWriter(record).write(event.SerializeToString())  # type: ignore[attr-defined]
        append_whole(self.path, record.getvalue())
