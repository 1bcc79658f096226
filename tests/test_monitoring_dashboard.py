"""The Grafana dashboard: generated JSON is current, every query names registered metrics and
parses as PromQL, provisioning and scrape config are valid."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from monitoring.collector import CATALOG, registered_sample_names
from monitoring.exporter import DEFAULT_PORT
from monitoring.grafana import dashboard

GRAFANA = Path(dashboard.__file__).parent
PROMTOOL = shutil.which("promtool")
METRIC = re.compile(r"\bmidrange_[a-z0-9_]+\b")


def test_committed_json_matches_the_python_definition() -> None:
    assert dashboard.JSON_PATH.read_text() == dashboard.render(), (
        "monitoring/grafana/midrange.json is stale: run python -m monitoring.grafana.dashboard"
    )
    assert dashboard.main(["--check"]) == 0


def test_every_query_names_only_registered_metrics() -> None:
    registered = registered_sample_names()
    for query in dashboard.all_queries():
        names = set(METRIC.findall(query.expr))
        assert names, f"query names no midrange_ metric: {query.expr}"
        assert names <= registered, f"unregistered metric(s) {names - registered} in: {query.expr}"


def test_every_exported_family_is_on_the_dashboard() -> None:
    used = {n for q in dashboard.all_queries() for n in METRIC.findall(q.expr)}
    missing = [spec.name for spec in CATALOG if not set(spec.sample_names()) & used]
    assert missing == []


def test_panels_are_laid_out_without_overlap() -> None:
    board = json.loads(dashboard.JSON_PATH.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in board["panels"]:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {panel['title']!r} overlaps another"
                cells.add((x, y))
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    # promtool has no expression checker, but it parses recording rules: one rule per query.
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, query in enumerate(dashboard.all_queries()):
        expr = query.expr.replace("$__rate_interval", "1m")
        lines += [f"      - record: dashboard:query_{i}", f"        expr: {json.dumps(expr)}"]
    rules = tmp_path / "rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    result = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_scrape_config_is_valid_and_covers_the_default_port() -> None:
    config = GRAFANA / "prometheus.yml"
    result = subprocess.run([PROMTOOL, "check", "config", str(config)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"127.0.0.1:{DEFAULT_PORT}" in config.read_text()


def test_provisioning_files() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed")
    datasources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yml").read_text())
    (ds,) = datasources["datasources"]
    assert ds["type"] == "prometheus" and ds["url"].startswith("http://")
    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/midrange.yml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]
    board = json.loads(dashboard.JSON_PATH.read_text())
    assert board["templating"]["list"][0]["type"] == "datasource"
