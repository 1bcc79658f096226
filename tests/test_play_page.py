"""The cockpit in a real headless Chromium against a real ``python -m pipeline.play``: the page
loads, keys turn the own fighter and fire (checked against the server's state), a fight ends
with the right result shown, and two viewers each fly a seat."""

from __future__ import annotations

import math
from contextlib import contextmanager

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


@contextmanager
def _finger_on(driver, element):
    """A finger held on ``element`` (touch pointer events, as a phone sends them), lifted on
    the way out."""
    from selenium.webdriver.common.actions import interaction
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.actions.pointer_input import PointerInput

    builder = ActionBuilder(driver, mouse=PointerInput(interaction.POINTER_TOUCH, "finger"))
    builder.pointer_action.move_to(element).pointer_down()
    builder.perform()
    try:
        yield
    finally:
        builder.clear_actions()  # releases what is held: the finger leaves the screen


@pytest.mark.slow
def test_touch_buttons_fly_the_fighter_on_a_phone():
    """On a phone's touch screen the buttons under the view show (and the key help does not);
    a finger on the left button turns red left and on FIRE launches a missile, on the server."""
    with play_server("--red", "human", "--blue", "straight", "--scenario", "head_on") as server, \
            chromium(phone=True) as driver:
        open_page(driver, server.url)
        wait_until(lambda: page_value(driver, "window.cockpit.held.join()") == "red", "the page to fly red")
        buttons = driver.find_element("id", "touch")
        assert buttons.is_displayed() and not driver.find_element("id", "keys").is_displayed()
        with _finger_on(driver, driver.find_element("css selector", '[data-touch="left"]')):
            wait_until(lambda: (s := server.state())["seats"]["red"]["rudder"] == 1 and _red(s)["heading"] > 0.05,
                       "red to turn left on the server")
        wait_until(lambda: server.state()["seats"]["red"]["rudder"] == 0, "red's rudder back to centre")
        with _finger_on(driver, driver.find_element("css selector", '[data-touch="fire"]')):
            fired = wait_until(lambda: (s := server.state())["missiles"] and s, "red's missile on the server")
        wait_until(lambda: server.state()["seats"]["red"]["fire"] is False, "red's fire button released")
        assert [m["side"] for m in fired["missiles"]] == ["red"]


@pytest.mark.slow
def test_the_menu_sets_up_a_fight_between_two_agents_to_watch():
    """From the page's menu: shooter against straight, head-on. The seats change on the
    server, the page gives back the seat no person flies any more and watches, the score
    starts again, and the fight runs to red's kill."""
    from selenium.webdriver.support.ui import Select

    with play_server("--red", "human", "--blue", "crank") as server, chromium() as driver:
        open_page(driver, server.url)
        wait_until(lambda: page_value(driver, "window.cockpit.held.join()") == "red", "the page to fly red")
        driver.find_element("id", "menu-toggle").click()
        for field, spec in (("red-spec", "shooter"), ("blue-spec", "straight")):
            box = driver.find_element("id", field)
            box.clear()
            box.send_keys(spec)
        Select(driver.find_element("id", "scenario")).select_by_value("head_on")
        before = page_value(driver, "window.cockpit.results.length")
        driver.find_element("id", "choose").click()
        wait_until(lambda: (s := server.state())["seats"]["red"]["spec"] == "shooter" and s["scenario"] == "head_on",
                   "the new fight on the server")
        state = server.state()
        assert state["seats"]["blue"] == {"spec": "straight", "human": False}
        wait_until(lambda: page_value(driver, "window.cockpit.held.length") == 0, "the page to watch")
        assert driver.find_element("id", "seats-line").text.endswith("watching")
        Select(driver.find_element("id", "time-scale")).select_by_value("8")
        result = wait_until(lambda: page_value(driver, f"window.cockpit.results[{before}] || null"), "the fight's result")
        assert (result["winner"], result["reason"], result["score"]) == ("red", "kill", {"red": 1, "blue": 0, "draws": 0, "rounds": 1})
        assert page_value(driver, "window.cockpit.errors.length") == 0
