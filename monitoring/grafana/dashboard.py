"""The Grafana dashboard, defined in Python; ``midrange.json`` is generated from it.

Regenerate after editing: ``python -m monitoring.grafana.dashboard`` (``--check`` exits 1 when
the committed JSON is out of date). Every query uses only metrics the exporter registers; the
tests check both.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.command import CommandParser

JSON_PATH = Path(__file__).with_name("midrange.json")
"""The generated dashboard, committed next to this file."""
DASHBOARD_UID = "midrange-rl"
RATE = "$__rate_interval"
"""Grafana's rate window: at least four scrape intervals."""


@dataclass(frozen=True)
class Query:
    """One PromQL expression and its legend."""

    expr: str
    """PromQL; may use ``$__rate_interval``."""
    legend: str = ""
    """Legend template (``{{actor}}``)."""


@dataclass(frozen=True)
class Panel:
    """One panel: a time series unless ``kind`` says otherwise."""

    title: str
    """Panel title."""
    queries: tuple[Query, ...]
    """What it plots."""
    unit: str = "short"
    """Grafana unit id (``s``, ``bytes``, ``percentunit``, ``ops``...)."""
    kind: str = "timeseries"
    """``timeseries``, ``stat`` or ``table``."""
    description: str = ""
    """Hover help."""


@dataclass(frozen=True)
class Row:
    """A titled row of panels."""

    title: str
    """Row title."""
    panels: tuple[Panel, ...] = field(default_factory=tuple)
    """Panels, laid out four per line."""


def _q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


def _quantiles(metric: str, by: str = "") -> tuple[Query, ...]:
    group = f"le{', ' + by if by else ''}"
    label = f"{{{{{by}}}}} " if by else ""
    return tuple(
        _q(f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket[{RATE}])))", f"{label}p{int(q * 100)}")
        for q in (0.5, 0.99)
    )


ROWS: tuple[Row, ...] = (
    Row("Throughput", (
        Panel("Agent-steps per second", (_q(f"sum by (actor) (rate(midrange_actor_agent_steps_total[{RATE}]))", "actor {{actor}}"),
                                          _q(f"sum(rate(midrange_actor_agent_steps_total[{RATE}]))", "all")), "ops",
              description="Decisions of learning fighters per second."),
        Panel("Physics env-steps per second", (_q(f"sum by (actor) (rate(midrange_actor_physics_steps_total[{RATE}]))", "actor {{actor}}"),), "ops",
              description="Environments x physics steps per second."),
        Panel("Learner samples and updates per second", (_q(f"sum(rate(midrange_learner_samples_total[{RATE}]))", "samples"),
                                                         _q(f"max(rate(midrange_learner_updates_total[{RATE}]))", "updates")), "ops",
              description="The job's: samples summed over the ranks of a torchrun job; every rank makes every update."),
        Panel("Each rank's share of the samples", (_q(f"sum by (instance) (rate(midrange_learner_samples_total[{RATE}])) "
                                                      f"/ ignoring (instance) group_left sum(rate(midrange_learner_samples_total[{RATE}])) "
                                                      "* on (instance) group_left (rank) midrange_build_info", "rank {{rank}}"),),
              "percentunit", description="Under torchrun: the samples each rank trained on, as a share of the job's (one exporter per rank)."),
        Panel("Policy version", (_q("max(midrange_policy_version)", "version"),), kind="stat"),
        Panel("Env worker restarts", (_q(f"sum by (reason) (increase(midrange_env_worker_restarts_total[{RATE}]))", "{{reason}}"),), "short",
              description="Env worker processes restarted: died (crashed or exited) or timeout (hung past step_timeout_s, killed)."),
    )),
    Row("Ring and policy lag", (
        Panel("Ring slots by state", (_q("sum by (state) (midrange_ring_slots)", "{{state}}"),
                                      _q("sum(midrange_ring_capacity_slots)", "capacity"))),
        Panel("Ring slot reuses per second", (_q(f"rate(midrange_ring_slot_reuses_total[{RATE}])", "reuses"),), "ops",
              description="Slots handed out again: the ring allocates nothing in the steady state."),
        Panel("Ring samples", (_q(f"rate(midrange_ring_produced_samples_total[{RATE}])", "produced/s"),
                               _q(f"rate(midrange_ring_consumed_samples_total[{RATE}])", "consumed/s"),
                               _q(f"rate(midrange_ring_dropped_samples_total[{RATE}])", "dropped/s"),
                               _q("midrange_ring_in_flight_samples", "in flight")), "short"),
        Panel("Dropped chunks per second", (_q(f"sum by (reason) (rate(midrange_dropped_chunks_total[{RATE}]))", "{{reason}}"),
                                            _q(f"rate(midrange_ring_dropped_chunks_total[{RATE}])", "ring")), "ops"),
        Panel("Actor slot wait", _quantiles("midrange_actor_slot_wait_seconds", "actor"), "s",
              description="Backpressure: time actors wait for a free slot."),
        Panel("Learner batch wait", _quantiles("midrange_learner_batch_wait_seconds"), "s",
              description="Starvation: time the learner waits for ready chunks."),
        Panel("Policy lag (versions)", (*_quantiles("midrange_policy_lag_versions"),
                                        _q(f"rate(midrange_policy_lag_versions_sum[{RATE}]) / rate(midrange_policy_lag_versions_count[{RATE}])", "mean"))),
        Panel("Actor/learner overlap", (_q("midrange_overlap_ratio", "overlap"),), "percentunit", kind="stat",
              description="Fraction of wall time so far with actor and learner work at once: host busy intervals in every run, the device figure of a --profile trace once recorded."),
    )),
    Row("Memory and copies", (
        Panel("CUDA memory", (_q("midrange_cuda_memory_allocated_bytes", "allocated {{device}}"),
                              _q("midrange_cuda_memory_reserved_bytes", "reserved {{device}}"),
                              _q("midrange_cuda_memory_peak_allocated_bytes", "peak {{device}}")), "bytes"),
        Panel("CUDA allocator activity", (_q(f"rate(midrange_cuda_allocations_total[{RATE}])", "allocations/s {{device}}"),
                                          _q(f"rate(midrange_cuda_segment_allocations_total[{RATE}])", "cudaMalloc/s {{device}}"),
                                          _q("midrange_cuda_alloc_retries_total", "retries {{device}}"),
                                          _q("midrange_cuda_ooms_total", "OOMs {{device}}")), "short",
              description="cudaMalloc/s and retries stay at 0 in a steady state: memory is reused."),
        Panel("Pinned host memory", (_q("midrange_pinned_host_memory_bytes", "pinned {{device}}"),
                                     _q(f"rate(midrange_pinned_host_allocations_total[{RATE}])", "new blocks/s")), "bytes"),
        Panel("Host/device copies", (_q(f"sum by (direction) (rate(midrange_copy_bytes_total[{RATE}]))", "{{direction}}"),), "Bps"),
    )),
    Row("Episodes", (
        Panel("Episodes per second by outcome", (_q(f"sum by (outcome) (rate(midrange_episodes_total[{RATE}]))", "{{outcome}}"),), "ops"),
        Panel("Win rate by opponent", (_q(f'sum by (opponent) (rate(midrange_episodes_total{{outcome="win"}}[{RATE}])) '
                                          f"/ sum by (opponent) (rate(midrange_episodes_total[{RATE}]))", "{{opponent}}"),), "percentunit"),
        Panel("Episode length (decision steps)", (*_quantiles("midrange_episode_length_steps", "opponent"),
                                                  _q(f"sum by (opponent) (rate(midrange_episode_length_steps_sum[{RATE}])) "
                                                     f"/ sum by (opponent) (rate(midrange_episode_length_steps_count[{RATE}]))", "{{opponent}} mean"))),
    )),
    Row("League (--opponent league)", (
        Panel("League ratings (Elo)", (_q("midrange_league_rating", "{{player}}"),),
              description="Bradley-Terry ratings of the learner, the snapshots and the anchors, refit at each report."),
        Panel("Learner's score per league opponent",
              (_q(f'(sum by (opponent) (rate(midrange_league_games_total{{outcome="win"}}[{RATE}])) '
                  f'+ 0.5 * sum by (opponent) (rate(midrange_league_games_total{{outcome="draw"}}[{RATE}]))) '
                  f"/ sum by (opponent) (rate(midrange_league_games_total[{RATE}]))", "{{opponent}}"),), "percentunit",
              description="Wins plus half the draws per league game against each opponent."),
        Panel("League games per second", (_q(f"max by (opponent) (rate(midrange_league_games_total[{RATE}]))", "{{opponent}}"),), "ops",
              description="Under torchrun every rank's records hold the whole job's games: the largest count is the job's."),
    )),
    Row("Learning", (
        Panel("Losses", (_q("midrange_learner_loss", "{{term}}"),)),
        Panel("Approx. KL and clip fraction", (_q("midrange_learner_approx_kl", "KL"),
                                               _q("midrange_learner_clip_fraction", "clip fraction"))),
        Panel("Entropy", (_q("midrange_learner_entropy", "entropy"),)),
        Panel("Explained variance", (_q("midrange_learner_explained_variance", "explained variance"),)),
        Panel("Gradient norm", (_q("midrange_learner_grad_norm", "grad norm"),)),
        Panel("Learning rate", (_q("midrange_learner_learning_rate", "lr"),)),
        Panel("Other learner statistics", (_q("midrange_learner_stat", "{{name}}"),)),
        Panel("Build", (_q("midrange_build_info", "{{version}} torch {{torch}} cuda {{cuda}} rank {{rank}}"),), kind="table"),
    )),
)


def all_queries(rows: Sequence[Row] = ROWS) -> list[Query]:
    """Every query of the dashboard, in order."""
    return [q for row in rows for panel in row.panels for q in panel.queries]


def _panel_json(panel: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    ds = {"type": "prometheus", "uid": "${datasource}"}
    out: dict[str, Any] = {
        "id": pid,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": ds,
        "gridPos": {"h": 8, "w": 6, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": ds, "expr": q.expr, "legendFormat": q.legend,
             **({"format": "table", "instant": True} if panel.kind == "table" else {})}
            for i, q in enumerate(panel.queries)
        ],
    }
    return out


def build(rows: Sequence[Row] = ROWS) -> dict[str, Any]:
    """The dashboard as Grafana JSON (schema 39)."""
    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    for row in rows:
        panels.append({"id": pid, "type": "row", "title": row.title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y = pid + 1, y + 1
        for i, panel in enumerate(row.panels):
            panels.append(_panel_json(panel, pid, (i % 4) * 6, y + (i // 4) * 8))
            pid += 1
        y += ((len(row.panels) + 3) // 4) * 8
    return {
        "uid": DASHBOARD_UID,
        "title": "midrange-rl training",
        "description": "Throughput, ring, policy lag, memory reuse, episodes and learning of a midrange-rl run.",
        "tags": ["midrange-rl", "reinforcement-learning"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "5s",
        "time": {"from": "now-30m", "to": "now"},
        "templating": {"list": [{
            "name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
            "current": {}, "hide": 0, "refresh": 1,
        }]},
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    """The JSON text written to :data:`JSON_PATH`."""
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with ``--check`` verify) ``midrange.json``."""
    parser = CommandParser(prog="python -m monitoring.grafana.dashboard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if midrange.json is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = JSON_PATH.read_text() if JSON_PATH.exists() else ""
        if current != text:
            print(f"{JSON_PATH} is out of date: run python -m monitoring.grafana.dashboard", file=sys.stderr)
            return 1
        print(f"{JSON_PATH} is up to date")
        return 0
    from monitoring.profiling import atomic_write_text

    atomic_write_text(JSON_PATH, text)
    print(f"wrote {JSON_PATH} ({len(all_queries())} queries)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
