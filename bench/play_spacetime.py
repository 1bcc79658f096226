"""The live spacetime graph's cost: one moment's numbers from pipeline.play.spacetime (the path
tables) against the same regions and paths integrated step by step (the matplotlib graph's
pipeline.drawing.spacetime.spacetime_geometry), in the same run, on one CPU thread.

Every moment of a recorded fight (shooter against pursuit, head-on, recorded first with
``pipeline.evaluate --record``; or ``--replay FILE``) at which both fighters fly, seen from each
side:

- ``payload_ms_p50`` / ``p95``: :func:`pipeline.play.spacetime.frame_payload` per call, tables
  built (``tables_s``: building them, once per process and config);
- ``baseline_ms_p50``: ``spacetime_geometry`` (the same slices and path points, 144 bearings)
  for a few of those moments, and ``speedup`` the ratio of the medians;
- ``bytes_p50`` / ``bytes_max``: the JSON sent per state;
- ``live_cpu_ms_per_s``: what a live fight costs per wall second for one seat at real time:
  the graph is computed once per ``REFRESH_S`` of sim time (one state in ten at 20 states a
  second) and sent again in between.

``--screenshots DIR`` also writes DIR/cockpit-replay.png (the page with that replay, scrubbed to
just after the first launch) and DIR/cockpit-spacetime.png (the 3-D graph panel alone), from
``python -m pipeline.play --replay FILE`` in headless Chromium.

Usage: ``python bench/play_spacetime.py [--replay FILE] [--screenshots DIR]``. The last line is
``RESULT payload_ms_p50=... p95=... baseline_ms_p50=... speedup=... bytes_p50=... ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from pipeline.drawing.spacetime import fight_state, spacetime_geometry
from pipeline.play import spacetime
from sim.replay.format import Replay, load_replay

BASELINE_MOMENTS = 4
"""Moments timed with the step-by-step baseline (about a second each)."""


def _time_ms(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1e3


def measure(replay: Replay) -> dict[str, float]:
    cfg = replay.config
    tables_s = _time_ms(lambda: spacetime.warm(cfg)) / 1e3
    reach = spacetime.reach_for(cfg)
    alive = [i for i in range(replay.num_frames) if bool(replay.arrays["f_alive"][i].all())]
    costs, sizes = [], []
    for i in alive:
        frame = replay.frame(i)
        for own in (0, 1):
            start = time.perf_counter()
            graph = spacetime.frame_payload(frame, cfg, own, reach)
            costs.append((time.perf_counter() - start) * 1e3)
            sizes.append(len(json.dumps(graph, separators=(",", ":"))))
    picks = alive[:: max(1, len(alive) // BASELINE_MOMENTS)][:BASELINE_MOMENTS]
    baseline = [_time_ms(lambda i=i: spacetime_geometry(
        fight_state(replay, float(replay.arrays["t_s"][i]), 0), spacetime.HORIZON_S, spacetime.SLICE_S,
        spacetime.PATH_STEP_S)) for i in picks]
    p50 = statistics.median(costs)
    return {
        "payload_ms_p50": p50, "p95": statistics.quantiles(costs, n=20)[-1], "baseline_ms_p50": statistics.median(baseline),
        "speedup": statistics.median(baseline) / p50, "bytes_p50": statistics.median(sizes), "bytes_max": max(sizes),
        "tables_s": tables_s, "live_cpu_ms_per_s": p50 / spacetime.REFRESH_S, "moments": len(costs),
    }


def screenshots(replay_path: Path, out: Path) -> None:
    """The replay view and the graph panel, from the real page in headless Chromium."""
    from tests.play_harness import chromium, page_value, play_server, wait_until

    out.mkdir(parents=True, exist_ok=True)
    replay = load_replay(replay_path)
    launch = next(float(e["t_s"]) for e in replay.events if e["kind"] == "launch")
    moment = launch + 6.0
    with play_server("--replay", str(replay_path)) as server, chromium(1400, 760) as driver:
        driver.get(server.url)
        wait_until(lambda: page_value(driver, "window.replayView && window.replayView.last"), "the replay in the page")
        driver.execute_script("const s = document.getElementById('replay-slider'); s.value = String(arguments[0]);"
                              "s.dispatchEvent(new Event('input'));", moment)
        wait_until(lambda: page_value(driver, f"window.replayView.last.t >= {moment - 0.6}"
                                              " && window.spacetimeView.shownKey === window.spacetimeView.key"
                                              f" && window.spacetimeView.payload && window.spacetimeView.payload.t >= {moment - 0.6}"),
                   "the scrubbed moment and its graph")
        driver.save_screenshot(str(out / "cockpit-replay.png"))
        driver.find_element("id", "spacetime").screenshot(str(out / "cockpit-spacetime.png"))
    print(f"wrote {out / 'cockpit-replay.png'} and {out / 'cockpit-spacetime.png'} (the moment {moment:.1f} s)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replay", type=Path, metavar="FILE", help="the fight to measure (default: record one)")
    p.add_argument("--screenshots", type=Path, metavar="DIR", help="also write DIR/cockpit-replay.png and "
                   "DIR/cockpit-spacetime.png")
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}, torch {torch.__version__}, one thread, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory() as folder:
        path = args.replay
        if path is None:
            from tests.replay_damage import record_fight

            path = record_fight(Path(folder), episodes=1)
        r = measure(load_replay(path))
        print(f"{r['moments']:.0f} moments: payload {r['payload_ms_p50']:.1f} ms (p95 {r['p95']:.1f} ms), "
              f"step by step {r['baseline_ms_p50']:.0f} ms, tables built in {r['tables_s']:.1f} s; "
              f"{r['bytes_p50']:.0f} bytes of JSON (max {r['bytes_max']:.0f})")
        if args.screenshots is not None:
            screenshots(path, args.screenshots)
    print(f"RESULT payload_ms_p50={r['payload_ms_p50']:.2f} p95={r['p95']:.2f} baseline_ms_p50={r['baseline_ms_p50']:.0f} "
          f"speedup={r['speedup']:.0f}x bytes_p50={r['bytes_p50']:.0f} bytes_max={r['bytes_max']:.0f} "
          f"tables_s={r['tables_s']:.1f} live_cpu_ms_per_s={r['live_cpu_ms_per_s']:.1f}")


if __name__ == "__main__":
    main()
