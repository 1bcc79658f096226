"""How much actor and learner work overlaps, from a Chrome/Perfetto trace.

Usage: ``python -m monitoring.overlap TRACE.json [--json]``

Definitions (all times from complete ``"ph": "X"`` events, microseconds in the trace):

- a *role span* is a host range (``record_function`` / :func:`monitoring.span`) whose name
  starts with ``actor:`` or ``learner:``; a role's *busy time* is the length of the union of its
  spans over all threads (nested and concurrent spans count once);
- *wall time* runs from the first start to the last end of all role spans and GPU activity;
- the *overlap* is the length of the intersection of the actor union and the learner union;
  ``overlap_fraction = overlap / wall``;
- on GPU traces: *GPU busy* is the union of kernels, memcpys and memsets; *copy time hidden* is
  the part of the memcpy union that lies under the kernel union (copy engines working while SMs
  compute); GPU time per role comes from the ``gpu_user_annotation`` ranges the profiler
  derives from the same spans.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.command import CommandParser

Interval = tuple[float, float]
ROLES = ("actor", "learner")
_GPU_COMPUTE = ("kernel", "gpu_memset")
_GPU_COPY = ("gpu_memcpy",)
_GPU_ANNOTATION = "gpu_user_annotation"


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Merge intervals into sorted, disjoint ones."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def length(intervals: Sequence[Interval]) -> float:
    """Total length of disjoint intervals."""
    return sum(e - s for s, e in intervals)


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Intersection of two sorted disjoint interval lists."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start = max(a[i][0], b[j][0])
        end = min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


@dataclass(frozen=True)
class GpuReport:
    """GPU side of a trace (seconds)."""

    busy_s: float
    """Union of kernels, memcpys and memsets."""
    busy_fraction: float
    """busy_s / wall time."""
    kernel_s: float
    """Union of kernels (and memsets)."""
    copy_s: float
    """Union of memcpys."""
    copy_hidden_s: float
    """Memcpy time under running kernels."""
    copy_hidden_fraction: float
    """copy_hidden_s / copy_s (0 when there are no copies)."""
    role_busy_s: dict[str, float]
    """GPU ranges per role (from ``gpu_user_annotation``), union length."""


@dataclass(frozen=True)
class OverlapReport:
    """What :func:`analyze_trace` finds (seconds)."""

    wall_s: float
    """From the first start to the last end of role spans and GPU activity."""
    busy_s: dict[str, float]
    """Union length of the host spans of each role (``actor``, ``learner``)."""
    busy_fraction: dict[str, float]
    """busy_s / wall_s per role."""
    instance_busy_s: dict[str, float]
    """Busy time per span owner: ``actor:0``, ``actor:1``, ``learner``, ..."""
    overlap_s: float
    """Time in which actor and learner spans ran at once."""
    overlap_fraction: float
    """overlap_s / wall_s."""
    span_count: int
    """Role spans found."""
    gpu: GpuReport | None
    """GPU analysis; None for a CPU-only trace."""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-able)."""
        return asdict(self)


def _owner(name: str) -> str:
    # "actor:3:rollout" -> "actor:3"; "learner:update" -> "learner"
    parts = name.split(":")
    if parts[0] == "actor" and len(parts) > 2:
        return f"actor:{parts[1]}"
    return parts[0]


def analyze_trace(trace: dict[str, Any] | list[dict[str, Any]]) -> OverlapReport:
    """Analyse a Chrome trace (the dict written by ``torch.profiler``, or its event list)."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        raise ValueError("trace must be a Chrome trace: a dict with a 'traceEvents' list, or a list of events")
    role: dict[str, list[Interval]] = {r: [] for r in ROLES}
    owners: dict[str, list[Interval]] = {}
    gpu_role: dict[str, list[Interval]] = {r: [] for r in ROLES}
    compute: list[Interval] = []
    copies: list[Interval] = []
    spans = 0
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X" or "dur" not in ev or "ts" not in ev:
            continue
        start = float(ev["ts"])
        iv = (start, start + float(ev["dur"]))
        cat = ev.get("cat", "")
        name = str(ev.get("name", ""))
        if cat in _GPU_COMPUTE:
            compute.append(iv)
            continue
        if cat in _GPU_COPY:
            copies.append(iv)
            continue
        prefix = name.split(":", 1)[0]
        if prefix not in ROLES or ":" not in name:
            continue
        if cat == _GPU_ANNOTATION:
            gpu_role[prefix].append(iv)
            continue
        spans += 1
        role[prefix].append(iv)
        owners.setdefault(_owner(name), []).append(iv)
    merged = {r: union(v) for r, v in role.items()}
    compute_u, copy_u = union(compute), union(copies)
    gpu_u = union(compute_u + copy_u)
    everything = union([iv for v in merged.values() for iv in v] + gpu_u)
    wall_us = (everything[-1][1] - everything[0][0]) if everything else 0.0

    def frac(x: float) -> float:
        return x / wall_us if wall_us > 0 else 0.0

    overlap_us = length(intersect(merged["actor"], merged["learner"]))
    gpu: GpuReport | None = None
    if gpu_u:
        copy_us = length(copy_u)
        hidden_us = length(intersect(copy_u, compute_u))
        gpu = GpuReport(
            busy_s=length(gpu_u) / 1e6,
            busy_fraction=frac(length(gpu_u)),
            kernel_s=length(compute_u) / 1e6,
            copy_s=copy_us / 1e6,
            copy_hidden_s=hidden_us / 1e6,
            copy_hidden_fraction=hidden_us / copy_us if copy_us > 0 else 0.0,
            role_busy_s={r: length(union(v)) / 1e6 for r, v in gpu_role.items()},
        )
    return OverlapReport(
        wall_s=wall_us / 1e6,
        busy_s={r: length(v) / 1e6 for r, v in merged.items()},
        busy_fraction={r: frac(length(v)) for r, v in merged.items()},
        instance_busy_s={k: length(union(v)) / 1e6 for k, v in sorted(owners.items())},
        overlap_s=overlap_us / 1e6,
        overlap_fraction=frac(overlap_us),
        span_count=spans,
        gpu=gpu,
    )


def load_trace(path: str | Path) -> dict[str, Any]:
    """Read a Chrome trace JSON (``.json`` or ``.json.gz``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"trace file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not a JSON trace: {exc}") from None


def format_report(report: OverlapReport) -> str:
    """Human-readable report; the last line is ``RESULT key=value ...``."""
    lines = [f"wall time            {report.wall_s * 1e3:10.3f} ms   ({report.span_count} role spans)"]
    for r in ROLES:
        lines.append(
            f"{r + ' busy':<20} {report.busy_s[r] * 1e3:10.3f} ms   {100 * report.busy_fraction[r]:5.1f} % of wall"
        )
    for owner, busy in report.instance_busy_s.items():
        lines.append(f"  {owner:<18} {busy * 1e3:10.3f} ms")
    lines.append(
        f"actor+learner overlap {report.overlap_s * 1e3:9.3f} ms   {100 * report.overlap_fraction:5.1f} % of wall"
    )
    result = {
        "wall_s": report.wall_s,
        "actor_busy_s": report.busy_s["actor"],
        "learner_busy_s": report.busy_s["learner"],
        "overlap_fraction": report.overlap_fraction,
    }
    if report.gpu is None:
        lines.append("GPU                  no GPU activity in this trace")
    else:
        g = report.gpu
        lines += [
            f"GPU busy             {g.busy_s * 1e3:10.3f} ms   {100 * g.busy_fraction:5.1f} % of wall",
            f"GPU kernels          {g.kernel_s * 1e3:10.3f} ms",
            f"GPU copies           {g.copy_s * 1e3:10.3f} ms   {100 * g.copy_hidden_fraction:5.1f} % hidden under compute",
        ]
        for r, busy in g.role_busy_s.items():
            lines.append(f"  GPU {r:<15} {busy * 1e3:10.3f} ms")
        result |= {"gpu_busy_fraction": g.busy_fraction, "copy_hidden_s": g.copy_hidden_s}
    lines.append("RESULT " + " ".join(f"{k}={v:.6g}" for k, v in result.items()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = CommandParser(prog="python -m monitoring.overlap", description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="Chrome/Perfetto trace JSON written by --profile (or .json.gz)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    try:
        report = analyze_trace(load_trace(args.trace))
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if report.span_count == 0:
        print("warning: no spans named 'actor:*' or 'learner:*' in this trace", file=sys.stderr)
    print(json.dumps(report.to_dict(), indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
