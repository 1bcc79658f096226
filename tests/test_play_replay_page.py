"""Replays and the spacetime graph in a real headless Chromium against a real
``python -m pipeline.play``: a replay scrubs, steps and plays to the moments the replay reader
holds; the 3-D graph is drawn (threat-coloured pixels), and not drawn when there is nothing to
draw; a damaged replay sent by the page is one line in the page and on the console, and the
server keeps serving."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.replay.format import load_replay
from tests.play_harness import chromium, needs_browser, page_value, play_server, wait_until
from tests.replay_damage import record_fight

pytestmark = [needs_browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def fight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded head-on fight: shooter (red) launches, hits and kills pursuit (blue)."""
    return record_fight(tmp_path_factory.mktemp("fight"), episodes=1)


def _open_replay_page(driver: Any, url: str) -> dict[str, Any]:
    driver.get(url)
    return wait_until(lambda: page_value(driver, "window.replayView && window.replayView.last && window.replayView.info"),
                      "the replay's first moment in the page")


def _scrub(driver: Any, t: float) -> None:
    driver.execute_script("const s = document.getElementById('replay-slider'); s.value = String(arguments[0]);"
                          "s.dispatchEvent(new Event('input'));", t)


def _shown_frame(driver: Any, frame: int) -> dict[str, Any]:
    return wait_until(lambda: page_value(driver, f"window.replayView.last && window.replayView.last.replay.frame === {frame}"
                                                 " && window.cockpit.last"), f"frame {frame} in the page")


def _assert_page_shows(driver: Any, replay: Any, i: int) -> None:
    """The state the page draws is the replay reader's frame ``i``."""
    shown = _shown_frame(driver, i)
    a = replay.arrays
    assert shown["t"] == pytest.approx(float(a["t_s"][i]), abs=1e-3)
    for s, f in enumerate(shown["fighters"]):
        assert (f["x"], f["y"]) == (pytest.approx(float(a["f_x"][i, s]), abs=0.01),
                                    pytest.approx(float(a["f_y"][i, s]), abs=0.01))
        assert f["alive"] == bool(a["f_alive"][i, s]) and f["missiles_left"] == int(a["f_ammo"][i, s])
    assert len(shown["missiles"]) == int(a["m_active"][i].sum())
    label = page_value(driver, "document.getElementById('replay-time').textContent")
    assert label == f"{float(a['t_s'][i]):.1f} / {float(a['t_s'][-1]):.1f} s"


def test_a_replay_scrubs_steps_and_plays_to_the_recorded_moments(fight: Path) -> None:
    replay = load_replay(fight)
    t = replay.arrays["t_s"]
    with play_server("--replay", str(fight)) as server, chromium() as driver:
        wait_until(lambda: "  replay: shooter-vs-pursuit-000.replay (shooter vs pursuit" in server.output(),
                   "the replay named on the console")
        info = _open_replay_page(driver, server.url)
        assert info["frames"] == len(t) and info["agents"] == {"red": "shooter", "blue": "pursuit"}
        kinds = page_value(driver, "[...document.querySelectorAll('#replay-marks span')].map(m => m.dataset.kind)")
        assert kinds[0] == "launch" and {"hit", "kill", "end"} <= set(kinds)

        # Scrub to a time between two frames: the page shows the frame at or before it.
        i = len(t) // 2
        chosen = float(t[i]) + 0.4 * float(t[i + 1] - t[i])
        assert int(np.searchsorted(t, chosen, side="right")) - 1 == i
        _scrub(driver, chosen)
        _assert_page_shows(driver, replay, i)
        graph = page_value(driver, "window.cockpit.last.spacetime")
        assert graph["seat"] == "red" and graph["origin"] == [pytest.approx(float(replay.arrays["f_x"][i, 0]), abs=0.01),
                                                              pytest.approx(float(replay.arrays["f_y"][i, 0]), abs=0.01)]

        driver.find_element("id", "replay-forward").click()
        _assert_page_shows(driver, replay, i + 1)
        driver.find_element("id", "replay-back").click()
        driver.find_element("id", "replay-back").click()
        _assert_page_shows(driver, replay, i - 1)

        # The graph seen from blue.
        from selenium.webdriver.support.ui import Select

        Select(driver.find_element("id", "replay-seat")).select_by_value("blue")
        wait_until(lambda: page_value(driver, "window.cockpit.last.spacetime && window.cockpit.last.spacetime.seat") == "blue",
                   "blue's graph")

        # Play at 8x from there to the end: the last frame (blue destroyed) is shown.
        Select(driver.find_element("id", "replay-speed")).select_by_value("8")
        driver.find_element("id", "replay-play").click()
        _assert_page_shows(driver, replay, len(t) - 1)
        assert page_value(driver, "window.replayView.playing") is False
        assert page_value(driver, "window.cockpit.last.spacetime") is None
        assert page_value(driver, "window.cockpit.errors.length") == 0


def _graph_drawn(driver: Any, t: float) -> None:
    """Wait until the graph on screen is the one of the moment ``t``."""
    wait_until(lambda: page_value(driver, "window.spacetimeView && window.spacetimeView.shownKey === window.spacetimeView.key"
                                          f" && window.spacetimeView.payload && window.spacetimeView.payload.t === {t}"),
               f"the graph of {t} s on screen")


def _threat_pixels(png: bytes) -> tuple[int, int]:
    """Pixels of the threat colour (strong red) and distinct colours in a screenshot."""
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    red = int(((r > 140) & (g < 90) & (b < 90)).sum())
    return red, len(np.unique(img.reshape(-1, 3), axis=0))


def test_the_spacetime_graph_is_drawn_live_and_in_a_replay(fight: Path) -> None:
    pytest.importorskip("PIL", reason="needs Pillow (pip install -e '.[viz]')")
    with play_server("--red", "straight", "--blue", "straight", "--scenario", "head_on") as server, chromium() as driver:
        driver.get(server.url)
        state = wait_until(lambda: page_value(driver, "window.cockpit.last && window.cockpit.last.spacetime && window.cockpit.last"),
                           "a live state with its spacetime graph")
        assert state["spacetime"]["threat_escape"] and state["spacetime"]["own_reach"]
        hud = wait_until(lambda: server.state()["hud"], "the server's HUD")
        assert {"escape_margin_s", "enemy_in_own_reach", "own_in_enemy_reach", "own_escape_possible"} <= set(hud)
        wait_until(lambda: page_value(driver, "document.querySelector('.spacetime-hud').dataset.state") == "shown",
                   "the graph's HUD")
        _graph_drawn(driver, page_value(driver, "window.spacetimeView.payload.t"))
        red, colours = _threat_pixels(driver.find_element("id", "spacetime").screenshot_as_png)
        assert red > 500 and colours > 50, (red, colours)
        text = page_value(driver, "document.querySelector('.spacetime-hud').textContent")
        assert "escape time margin" in text
        # V turns the graph round (its camera moves), and again stops it.
        camera = "window.spacetimeView.camera.position.toArray()"
        before = page_value(driver, camera)
        driver.find_element("tag name", "body").send_keys("v")
        wait_until(lambda: page_value(driver, "window.spacetimeView.rotating") and page_value(driver, camera) != before,
                   "the graph to turn")
        driver.find_element("tag name", "body").send_keys("v")
        assert page_value(driver, "window.spacetimeView.rotating") is False

    replay = load_replay(fight)
    with play_server("--replay", str(fight)) as server, chromium() as driver:
        _open_replay_page(driver, server.url)
        _scrub(driver, float(replay.arrays["t_s"][5]))
        _shown_frame(driver, 5)
        _graph_drawn(driver, float(replay.arrays["t_s"][5]))
        red, colours = _threat_pixels(driver.find_element("id", "spacetime").screenshot_as_png)
        assert red > 500 and colours > 50, (red, colours)
        # At the end blue is destroyed: no graph, no threat-coloured pixels.
        _scrub(driver, float(replay.arrays["t_s"][-1]))
        _shown_frame(driver, len(replay.arrays["t_s"]) - 1)
        wait_until(lambda: page_value(driver, "document.querySelector('.spacetime-hud').dataset.state === 'empty'"
                                              " && window.spacetimeView.shownKey === null"), "the graph cleared")
        red, _ = _threat_pixels(driver.find_element("id", "spacetime").screenshot_as_png)
        assert red == 0


def _leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("midrange-replay-*")}


def test_a_damaged_replay_from_the_page_is_one_line_and_the_server_keeps_serving(fight: Path, tmp_path: Path) -> None:
    data = fight.read_bytes()
    damaged = tmp_path / "damaged.replay"
    damaged.write_bytes(data[: len(data) // 2])
    before = _leftovers()
    with play_server("--red", "straight", "--blue", "straight") as server, chromium() as driver:
        driver.get(server.url)
        wait_until(lambda: page_value(driver, "window.cockpit.states > 0 && window.replayView"), "the live page")
        driver.find_element("id", "replay-file-input").send_keys(str(damaged))
        message = wait_until(lambda: page_value(driver, "window.cockpit.errors.at(-1)"), "the refusal in the page")
        assert message.startswith("error: damaged.replay: truncated") and "\n" not in message
        assert page_value(driver, "document.getElementById('message').textContent") == message
        wait_until(lambda: message in server.output(), "the line on the console")
        assert page_value(driver, "window.replayView.active") is False
        steps = server.get_json("stats.json")["steps"]
        wait_until(lambda: server.get_json("stats.json")["steps"] > steps, "the fight to go on")

        # A whole file from the same chooser opens; a seek for a replay that is not open is refused.
        driver.find_element("id", "replay-file-input").send_keys(str(fight))
        wait_until(lambda: page_value(driver, "window.replayView.active && window.replayView.last"), "the replay opened")
        driver.execute_script("window.cockpit.socket.send(JSON.stringify({type: 'seek', replay: 'nope', t: 1, seat: 'red'}))")
        refused = wait_until(lambda: (m := page_value(driver, "window.cockpit.errors.at(-1)")) != message and m,
                             "the refused seek")
        assert refused == "error: no open replay 'nope': open the file again"
    assert _leftovers() == before
