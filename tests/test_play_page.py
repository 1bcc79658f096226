"""The cockpit in a real headless Chromium against a real ``python -m pipeline.play``: the page
loads, keys turn the own fighter and fire (checked against the server's state), a fight ends
with the right result shown, and two viewers each fly a seat."""

from __future__ import annotations

import math

import pytest

from tests.play_harness import (
    chromium,
    needs_browser,
    open_page,
    page_value,
    play_server,
    wait_until,
)

pytestmark = needs_browser


def _red(state: dict) -> dict:
    return state["fighters"][0]


def _key(driver, key: str, down: bool) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    key = {"ArrowLeft": Keys.ARROW_LEFT, "ArrowRight": Keys.ARROW_RIGHT}.get(key, key)
    chain = ActionChains(driver)
    (chain.key_down(key) if down else chain.key_up(key)).perform()


def test_keys_turn_and_fire_the_own_fighter():
    """A turns red left (its heading grows), D right, T launches a missile: each seen in the
    server's own state, not in the page's drawing."""
    with play_server("--red", "human", "--blue", "straight", "--scenario", "head_on") as server, chromium() as driver:
        open_page(driver, server.url)
        wait_until(lambda: page_value(driver, "window.cockpit.held.join()") == "red", "the page to fly red")
        assert server.state()["seats"]["red"]["human"] is True
        start = _red(server.state())["heading"]
        assert abs(start) < 1e-6  # head-on: red starts flying along +x

        _key(driver, "a", True)
        left = wait_until(lambda: (s := server.state())["seats"]["red"]["rudder"] == 1 and _red(s)["heading"] > 0.05 and s,
                          "red to turn left on the server")
        _key(driver, "a", False)
        wait_until(lambda: server.state()["seats"]["red"]["rudder"] == 0, "red's rudder back to centre")

        _key(driver, "d", True)
        wait_until(lambda: _red(server.state())["heading"] < _red(left)["heading"] - 0.05, "red to turn right on the server")
        _key(driver, "d", False)

        assert _red(server.state())["missiles_left"] == 6
        _key(driver, "t", True)
        fired = wait_until(lambda: (s := server.state())["missiles"] and s, "red's missile on the server")
        _key(driver, "t", False)
        assert [m["side"] for m in fired["missiles"]] == ["red"]
        assert _red(fired)["missiles_left"] == 5
        # The page echoes what it sent: every input reached the server and came back in a state.
        assert page_value(driver, "window.cockpit.latencies.length") >= 5
        assert page_value(driver, "window.cockpit.errors.length") == 0
        # The page draws between states, at the display's rate.
        assert page_value(driver, "window.cockpit.frames") > page_value(driver, "window.cockpit.states") // 2


@pytest.mark.slow
def test_a_fight_ends_with_the_right_result_shown():
    """shooter against straight head-on is a kill by red; the page shows the result the server
    counted, and a round on the time limit is shown as a draw."""
    with play_server("--red", "shooter", "--blue", "straight", "--scenario", "head_on") as server, chromium() as driver:
        open_page(driver, server.url)
        from selenium.webdriver.support.ui import Select

        Select(driver.find_element("id", "time-scale")).select_by_value("8")
        wait_until(lambda: server.state()["time_scale"] == 8.0, "the server to run at 8x")
        shown = wait_until(lambda: page_value(driver, "document.getElementById('result').hidden ? null : document.getElementById('result').textContent"),
                           "the result on the page")
        score = server.state()["score"]
        assert score["red"] == 1 and score["blue"] == 0 and score["draws"] == 0
        assert shown == "Red wins — kill"
        assert page_value(driver, "window.cockpit.results[0].winner") == "red"
        fighters = page_value(driver, "window.cockpit.last.fighters")
        assert [f["alive"] for f in fighters] == [True, False]

    with play_server("--red", "straight", "--blue", "straight", "--scenario", "head_on", "--max-time", "2") as server, \
            chromium() as driver:
        open_page(driver, server.url)
        shown = wait_until(lambda: page_value(driver, "document.getElementById('result').hidden ? null : document.getElementById('result').textContent"),
                           "the result on the page")
        assert shown == "Draw — time limit"
        assert server.state()["score"]["draws"] >= 1


@pytest.mark.slow
def test_two_browsers_each_fly_a_seat():
    """``--red human --blue human``: one page takes red, the other blue; each one's key turns
    its own fighter only, and neither may take the other's seat."""
    with play_server("--red", "human", "--blue", "human", "--scenario", "head_on") as server, \
            chromium() as red_page, chromium() as blue_page:
        open_page(red_page, server.url + "?seat=red")
        open_page(blue_page, server.url + "?seat=blue")
        wait_until(lambda: page_value(red_page, "window.cockpit.held.join()") == "red", "the first page to fly red")
        wait_until(lambda: page_value(blue_page, "window.cockpit.held.join()") == "blue", "the second page to fly blue")

        _key(blue_page, "ArrowLeft", True)  # blue starts heading along -x
        turned = wait_until(lambda: (s := server.state())["seats"]["blue"]["rudder"] == 1 and s, "blue's rudder on the server")
        assert turned["seats"]["red"]["rudder"] == 0
        wait_until(lambda: math.cos(server.state()["fighters"][1]["heading"]) > -0.999, "blue to turn on the server")
        _key(blue_page, "ArrowLeft", False)

        red_page.find_element("id", "menu-toggle").click()
        red_page.find_element("id", "take-blue").click()
        message = wait_until(lambda: page_value(red_page, "window.cockpit.errors.at(-1)"), "the refusal on the page")
        assert message == "error: seat blue is taken by another viewer"
        assert page_value(red_page, "window.cockpit.held.join()") == "red"
