"""Metrics, exporter, dashboards and profiling of a training run.

Hot loops import only the facade and the timing scope::

    from monitoring import Metrics, span

Importing this package does not import ``prometheus_client``; :func:`start_exporter` (loaded on
first use) does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from monitoring.facade import Metrics, MetricsSnapshot
from monitoring.profiling import ProfileSession, span

if TYPE_CHECKING:
    from monitoring.exporter import Exporter, MetricsPortInUseError, start_exporter

__all__ = [
    "Exporter",
    "Metrics",
    "MetricsPortInUseError",
    "MetricsSnapshot",
    "ProfileSession",
    "span",
    "start_exporter",
]

_LAZY = {"Exporter", "MetricsPortInUseError", "start_exporter"}


def __getattr__(name: str) -> Any:
    # The exporter pulls in prometheus_client; load it only when asked for.
    if name in _LAZY:
        from monitoring import exporter

        return getattr(exporter, name)
    raise AttributeError(f"module 'monitoring' has no attribute {name!r}")
