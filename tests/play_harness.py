"""The cockpit's test harness: ``python -m pipeline.play`` as a real process and a real
headless Chromium driven by Selenium (Debian's ``chromium`` and ``chromium-driver``; the tests
that need them skip, with that reason, where they are missing).

Nothing here sleeps for a fixed time: every wait polls a condition under a generous hang guard.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
START_TIMEOUT_S = 180.0
"""Hang guard for the server to print its address (it imports torch and builds the sim)."""
WAIT_TIMEOUT_S = 90.0
"""Hang guard for a condition in the page or on the server."""

T = TypeVar("T")


def browser_missing() -> str | None:
    """Why no browser test can run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs selenium (pip install -e '.[test]')"
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        return "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return "needs aiohttp (pip install -e '.[play]')"
    return None


needs_browser = pytest.mark.skipif(browser_missing() is not None, reason=browser_missing() or "")


def wait_until(condition: Callable[[], T | None], what: str, timeout_s: float = WAIT_TIMEOUT_S) -> T:
    """Poll ``condition`` until it returns something truthy (returned); fail naming ``what``
    after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


class PlayServer:
    """A running ``python -m pipeline.play`` (started from the repository root)."""

    def __init__(self, proc: subprocess.Popen[str], url: str, lines: queue.Queue[str], log: list[str]) -> None:
        self.proc = proc
        self.url = url
        self._lines = lines
        self.log = log
        """Every line it printed so far (stdout and stderr)."""

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path.lstrip("/"), timeout=30) as response:
            return json.loads(response.read())

    def state(self) -> dict[str, Any]:
        return self.get_json("state.json")

    def output(self) -> str:
        while True:
            try:
                self.log.append(self._lines.get_nowait())
            except queue.Empty:
                return "".join(self.log)


def _pump(stream: Any, lines: queue.Queue[str]) -> None:
    for line in iter(stream.readline, ""):
        lines.put(line)


@contextmanager
def play_server(*args: str, cwd: Path = ROOT) -> Iterator[PlayServer]:
    """Start ``python -m pipeline.play --port 0 ARGS`` and yield it once it prints its
    address; stopped with SIGTERM (then killed) on the way out."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.play", "--port", "0", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    log: list[str] = []
    url = None
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while url is None:
            if proc.poll() is not None and lines.empty():
                raise AssertionError(f"pipeline.play exited {proc.returncode} before serving: {''.join(log)}")
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise AssertionError(f"pipeline.play printed no address in {START_TIMEOUT_S:.0f} s: {''.join(log)}") from None
                continue
            log.append(line)
            if line.startswith("cockpit: "):
                url = line.split()[1]
        yield PlayServer(proc, url, lines, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def chromium(width: int = 1280, height: int = 800, phone: bool = False) -> Iterator[Any]:
    """A headless Chromium under Selenium (a fresh profile each time); ``phone`` emulates a
    phone's touch screen (412 by 860 CSS pixels)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # No GPU: WebGL (the spacetime graph's three.js view) runs on SwiftShader, asked for by name
    # rather than left to Chromium's deprecated automatic fallback.
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--enable-unsafe-swiftshader", f"--window-size={width},{height}", "--disable-background-timer-throttling",
                 "--disable-renderer-backgrounding", "--disable-backgrounding-occluded-windows"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if phone:
        options.add_experimental_option("mobileEmulation", {
            "deviceMetrics": {"width": 412, "height": 860, "pixelRatio": 2.0, "touch": True},
            "userAgent": "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
                         "Chrome/156.0 Mobile Safari/537.36"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(WAIT_TIMEOUT_S)
    driver.set_script_timeout(WAIT_TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()


def page_value(driver: Any, expression: str) -> Any:
    """``expression`` evaluated in the page (``window.cockpit`` holds what the page saw)."""
    return driver.execute_script(f"return {expression};")


def open_page(driver: Any, url: str) -> None:
    """Load the page and wait until it has a state from the server and knows its seats."""
    driver.get(url)
    wait_until(lambda: page_value(driver, "window.cockpit && window.cockpit.states > 0 && window.cockpit.hello !== null"),
               "the page's first state")


def send_ws(driver: Any, message: str) -> None:
    """Send raw text over the page's own WebSocket."""
    driver.execute_script("window.cockpit.socket.send(arguments[0]);", message)
