"""A real Prometheus server scrapes a real short training run (``python -m pipeline.launch``); every
dashboard query returns data.

Needs Debian's ``prometheus`` package (``/usr/bin/prometheus``, ``/usr/bin/promtool``); without
it the tests are skipped with that reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from monitoring.grafana.dashboard import all_queries

REPO = Path(__file__).resolve().parents[1]
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="prometheus/promtool not installed (apt-get install prometheus; .ci/run installs it)",
)
RATE_WINDOW = "30s"  # stands in for Grafana's $__rate_interval at a 1 s scrape interval
DEADLINE_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read()


def _stop(proc: subprocess.Popen, name: str) -> str:
    """Stop a child we started (SIGINT, then SIGKILL) and return the end of its log."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
    log = getattr(proc, "log_path", None)
    out = log.read_text(errors="replace") if log is not None and log.exists() else ""
    return f"--- {name} output ---\n{out[-4000:]}"


def _popen_logged(cmd: list[str], log_path: Path, **kwargs) -> subprocess.Popen:
    """Start a child with its output in a file (a pipe nobody reads could fill and block it)."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, **kwargs)
    proc.log_path = log_path  # type: ignore[attr-defined]
    return proc


class PrometheusServer:
    """Our own Prometheus process on a free localhost port with a temporary storage dir."""

    def __init__(self, tmp: Path, target: str) -> None:
        self.port = _free_port()
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: midrange\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        subprocess.run([PROMTOOL, "check", "config", str(config)], check=True, capture_output=True)
        self.proc = _popen_logged(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            tmp / "prometheus.log",
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                _get(f"{self.url}/-/ready")
                break
            except (urllib.error.URLError, ConnectionError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("prometheus did not become ready\n" + _stop(self.proc, "prometheus")) from None
                time.sleep(0.2)

    def query(self, expr: str) -> list[dict]:
        """Instant query through the HTTP API; the result vector."""
        body = json.loads(_get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def close(self) -> str:
        return _stop(self.proc, "prometheus")


def _dashboard_exprs() -> list[str]:
    return [q.expr.replace("$__rate_interval", RATE_WINDOW) for q in all_queries()]


def _start_run(cmd: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return _popen_logged(cmd, cwd / "run.log", cwd=cwd, env=env)


def _wait_for_metrics_url(proc: subprocess.Popen) -> str:
    """The run's first ``metrics: URL`` line names its exporter (it was started on port 0)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        match = re.search(r"^metrics: (http://\S+/metrics)$", proc.log_path.read_text(), re.M)  # type: ignore[attr-defined]
        if match:
            return match.group(1)
        time.sleep(0.2)
    raise AssertionError("the run never printed 'metrics: URL'\n" + _stop(proc, "run"))


def _assert_dashboard_has_data(prom: PrometheusServer, run: subprocess.Popen, skip: set[str]) -> None:
    """Poll until every dashboard expression returns a series (or fail naming the empty ones)."""
    exprs = [e for e in _dashboard_exprs() if not any(name in e for name in skip)]
    deadline = time.monotonic() + DEADLINE_S
    empty = exprs
    while True:
        if run.poll() is not None:
            raise AssertionError(f"the run exited early ({run.returncode})\n" + _stop(run, "run"))
        # At least three scrapes in the window, so rate() has samples to work on.
        scrapes = prom.query(f"count_over_time(midrange_build_info[{RATE_WINDOW}])")
        if scrapes and float(scrapes[0]["value"][1]) >= 3:
            empty = [e for e in exprs if not prom.query(e)]
            if not empty:
                return
        if time.monotonic() > deadline:
            raise AssertionError("dashboard expressions without data:\n  " + "\n  ".join(empty) + "\n" + _stop(run, "run"))
        time.sleep(1.0)


@pytest.mark.slow
@needs_prometheus
def test_prometheus_scrapes_pipeline_launch(tmp_path: Path) -> None:
    """A profiled launch: promtool-clean exposition, data behind every dashboard query, real
    updates and episodes, the overlap metric from the recorded trace, and a clean Ctrl-C."""
    run_dir = tmp_path / "run"
    run = _start_run(
        [sys.executable, "-m", "pipeline.launch", "--actors", "2", "--device", "cpu",
         "--envs-per-actor", "16", "--rollout-len", "8", "--total-steps", "100000000",
         "--display", "plain", "--run-dir", str(run_dir),
         "--metrics-addr", "127.0.0.1", "--metrics-port", "0",
         # Two learner iterations traced into RUN/trace.json, whose overlap report
         # RUN/trace.overlap.json also sets the overlap metric.
         "--profile", "2",
         # Short episodes, so that some end within the test's deadline.
         "--set", "sim.max_time_s=10", "--set", "run.eval_episodes=0",
         # A league, so its ratings and games panels have data too.
         "--opponent", "league", "--set", "league.snapshot_every=5",
         # Not about compiling, which a budget of 10^8 steps would turn on.
         "--set", "run.compile_step=false", "--set", "run.compile_agents=false"],
        cwd=tmp_path,
    )
    prom = None
    try:
        url = _wait_for_metrics_url(run)  # the launcher's first line names its exporter
        exposition = _get(url)
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=exposition, capture_output=True, timeout=60)
        assert check.returncode == 0, (check.stdout + check.stderr).decode()
        prom = PrometheusServer(tmp_path, url.removeprefix("http://").removesuffix("/metrics"))
        _assert_dashboard_has_data(prom, run, skip=set())
        # The run really trained and the overlap came from the recorded trace.
        assert float(prom.query("sum(midrange_actor_agent_steps_total)")[0]["value"][1]) > 0
        assert float(prom.query("sum(midrange_learner_updates_total)")[0]["value"][1]) > 0
        _wait_until(prom, run, "sum(midrange_episodes_total)", lambda v: v > 0, "above 0")
        # The report is written when the two traced iterations end, and the metric set after it
        # is seen at the next scrape: wait for both rather than read them at one moment.
        report = run_dir / "trace.overlap.json"
        _wait_until(prom, run, "midrange_overlap_ratio",
                    lambda v: report.is_file() and v == pytest.approx(json.loads(report.read_text())["overlap_fraction"]),
                    f"equal to the overlap_fraction of {report.name}")
        # The scrape served while the run is busy is still promtool-clean.
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=_get(url), capture_output=True, timeout=60)
        assert check.returncode == 0, (check.stdout + check.stderr).decode()
    finally:
        if prom is not None:
            prom.close()
        output = _stop(run, "pipeline.launch")
    # Ctrl-C ends the run cleanly: summary printed, exit code 0.
    assert run.returncode == 0, output
    assert re.search(r"^stopped in [\d.]+s: [\d,]+ agent-steps .*, [1-9]\d* updates", output, re.M), output


def _wait_until(prom: PrometheusServer, run: subprocess.Popen, expr: str, ok: Callable[[float], bool],
                what: str) -> None:
    """Poll until ``expr`` has a value for which ``ok`` holds (or fail, saying what was awaited,
    the last value and the run's output)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        result = prom.query(expr)
        value = float(result[0]["value"][1]) if result else None
        if value is not None and ok(value):
            return
        if run.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{expr} never became {what} (last value {value})\n" + _stop(run, "run"))
        time.sleep(1.0)
