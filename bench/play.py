"""The cockpit, smooth and light: frames drawn per second in a real headless Chromium, input to
state latency, and the server's CPU per viewer with 1 and with 8 viewers of one fight.

One ``python -m pipeline.play --red human --blue crank`` process serves; the page is Chromium
driven by Selenium (the harness of tests/play_harness.py: Debian's chromium and chromium-driver).

- ``fps``: requestAnimationFrame frames the page drew per wall second over ``--seconds``.
- ``input_to_state_ms_p50`` / ``p95``: from the page's keydown handler sending an input (its
  sequence number) to the first state from the server that echoes that number, measured in the
  page over ``--presses`` key presses and releases (A and D, turning red).
- ``server_cpu_per_viewer``: the server process's CPU milliseconds per wall second, with the
  page alone (1 viewer) and with 7 more WebSocket viewers of the same fight (8), each of which
  reads and parses every message; the figure is (CPU at 8 − CPU at 1) / 7. The baseline, in
  the same run: the server's CPU with that one viewer (``server_cpu_1``).
- ``pace_8``: sim seconds stepped per wall second while 8 viewers watched (1.0: the fight
  kept real time), with the steps that fell behind the clock (``late_steps_8``).

Usage: ``python bench/play.py [--seconds 10] [--presses 60] [--quick] [--screenshots DIR]``.
``--screenshots DIR`` also writes DIR/cockpit-play.png (a person against crank, at 4x) and
DIR/cockpit-watch.png (crank against shooter), the README's pictures. The last line printed is
``RESULT fps=... input_to_state_ms_p50=... p95=... server_cpu_per_viewer=...``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.play_harness import (
    PlayServer,
    browser_missing,
    chromium,
    open_page,
    page_value,
    play_server,
    wait_until,
)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure_server(server: PlayServer, seconds: float) -> dict[str, float]:
    """The server's CPU ms per wall second and its sim seconds per wall second over ``seconds``."""
    stats0, cpu0, wall0 = server.get_json("stats.json"), _cpu_s(server.proc.pid), time.monotonic()
    time.sleep(seconds)
    stats1, cpu1, wall1 = server.get_json("stats.json"), _cpu_s(server.proc.pid), time.monotonic()
    wall = wall1 - wall0
    return {"cpu_ms_per_s": 1000 * (cpu1 - cpu0) / wall, "pace": (stats1["sim_s"] - stats0["sim_s"]) / wall,
            "late": stats1["late_steps"] - stats0["late_steps"], "viewers": stats1["viewers"]}


async def _watchers(url: str, count: int, seconds: float, received: list[int]) -> None:
    """``count`` WebSocket viewers that read and parse every message for ``seconds``."""
    import aiohttp

    async def one(index: int) -> None:
        async with aiohttp.ClientSession() as http, http.ws_connect(url.replace("http", "ws", 1) + "ws") as ws:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                try:
                    msg = await ws.receive(timeout=max(end - time.monotonic(), 0.01))
                except asyncio.TimeoutError:
                    break
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                json.loads(msg.data)
                received[index] += 1

    await asyncio.gather(*(one(i) for i in range(count)))


def _with_watchers(server: PlayServer, count: int, seconds: float) -> dict[str, float]:
    """:func:`_measure_server` while ``count`` more viewers watch (they connect first)."""
    import threading

    received = [0] * count
    thread = threading.Thread(target=asyncio.run, args=(_watchers(server.url, count, seconds + 4.0, received),))
    thread.start()
    wait_until(lambda: server.get_json("stats.json")["viewers"] >= count + 1, f"{count} more viewers")
    time.sleep(1.0)  # every viewer connected and receiving before the window opens
    result = _measure_server(server, seconds)
    thread.join()
    result["received_min"] = min(received)
    return result


def _press_keys(driver, presses: int) -> list[float]:
    """Press and release A and D in turn; the page's measured latencies of those inputs."""
    from selenium.webdriver.common.action_chains import ActionChains

    start = page_value(driver, "window.cockpit.latencies.length")
    for i in range(presses):
        key = "a" if i % 2 == 0 else "d"
        ActionChains(driver).key_down(key).pause(0.08).key_up(key).pause(0.07).perform()
    wait_until(lambda: page_value(driver, "window.cockpit.latencies.length") >= start + 2 * presses,
               "every input echoed in a state")
    return page_value(driver, f"window.cockpit.latencies.slice({start})")


def _missiles_away(state: dict) -> bool:
    """Whether missiles of both sides are in flight, each side's 3 km or more from its shooter."""
    shooters = {f["side"]: f for f in state["fighters"]}
    away = {m["side"] for m in state["missiles"]
            if math.hypot(m["x"] - shooters[m["side"]]["x"], m["y"] - shooters[m["side"]]["y"]) > 3000}
    return away == {"red", "blue"}


def _screenshots(out: Path) -> None:
    """The README's pictures: a person (red, who turns and fires) against crank, and crank
    against shooter 15 s into the fight, each at 4x with missiles of both sides in flight."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import Select

    out.mkdir(parents=True, exist_ok=True)
    for name, args, after_s in (("play", ("--red", "human", "--blue", "crank", "--seed", "3"), 0.0),
                                ("watch", ("--red", "crank", "--blue", "shooter", "--seed", "1"), 15.0)):
        with play_server(*args) as server, chromium(1280, 720) as driver:
            open_page(driver, server.url)
            Select(driver.find_element("id", "time-scale")).select_by_value("4")
            if name == "play":
                wait_until(lambda: page_value(driver, "window.cockpit.held.join()") == "red", "the page to fly red")
                ActionChains(driver).key_down("a").pause(1.0).key_up("a").key_down("t").pause(0.3).key_up("t").perform()
            wait_until(lambda after_s=after_s: _missiles_away(s := server.state()) and s["t"] >= after_s,
                       "missiles of both sides well away", 180)
            driver.save_screenshot(str(out / f"cockpit-{name}.png"))
            print(f"wrote {out / f'cockpit-{name}.png'}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="length of each measuring window")
    p.add_argument("--presses", type=int, default=60, help="key presses timed")
    p.add_argument("--viewers", type=int, default=8, help="viewers of the crowded measurement")
    p.add_argument("--quick", action="store_true", help="4 s windows and 20 presses")
    p.add_argument("--screenshots", type=Path, metavar="DIR", help="also write DIR/cockpit-play.png and DIR/cockpit-watch.png")
    args = p.parse_args()
    if args.quick:
        args.seconds, args.presses = 4.0, 20
    missing = browser_missing()
    if missing:
        raise SystemExit(f"error: bench/play.py {missing}")
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with play_server("--red", "human", "--blue", "crank") as server, chromium() as driver:
        open_page(driver, server.url)
        wait_until(lambda: page_value(driver, "window.cockpit.held.join()") == "red", "the page to fly red")
        frames0, t0 = page_value(driver, "[window.cockpit.frames, performance.now()]")
        one = _measure_server(server, args.seconds)
        frames1, t1 = page_value(driver, "[window.cockpit.frames, performance.now()]")
        fps = 1000 * (frames1 - frames0) / (t1 - t0)
        print(f"1 viewer: {fps:.1f} frames/s drawn, server {one['cpu_ms_per_s']:.1f} CPU ms/s, "
              f"pace {one['pace']:.3f}, {one['late']} late steps")
        latencies = _press_keys(driver, args.presses)
        p50 = statistics.median(latencies)
        p95 = statistics.quantiles(latencies, n=20)[-1]
        print(f"input to state over {len(latencies)} inputs: p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {max(latencies):.1f} ms")
        crowd = _with_watchers(server, args.viewers - 1, args.seconds)
        print(f"{crowd['viewers']} viewers: server {crowd['cpu_ms_per_s']:.1f} CPU ms/s, pace {crowd['pace']:.3f}, "
              f"{crowd['late']} late steps, each extra viewer got >= {crowd['received_min']} messages")
    per_viewer = (crowd["cpu_ms_per_s"] - one["cpu_ms_per_s"]) / (args.viewers - 1)
    if args.screenshots is not None:
        _screenshots(args.screenshots)
    print(f"RESULT fps={fps:.1f} input_to_state_ms_p50={p50:.1f} p95={p95:.1f} "
          f"server_cpu_per_viewer={per_viewer:.2f}ms/s server_cpu_1={one['cpu_ms_per_s']:.1f}ms/s "
          f"pace_{args.viewers}={crowd['pace']:.3f} late_steps_{args.viewers}={crowd['late']}")


if __name__ == "__main__":
    main()
