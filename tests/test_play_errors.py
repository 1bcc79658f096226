"""Bad input to a running cockpit, from a real headless Chromium: malformed and oversized
WebSocket messages, unknown agents, a checkpoint that does not load, a followed run's damaged
checkpoint. Each is a clear one-line message in the page and on the server's console; the
server keeps serving and writes nothing."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.play_harness import (
    ROOT,
    chromium,
    needs_browser,
    open_page,
    page_value,
    play_server,
    send_ws,
    wait_until,
)

pytestmark = [needs_browser, pytest.mark.slow]


def _files() -> list[str]:
    """The files in the working tree that git does not track or ignore (where a server that
    wrote a log, a replay or a temporary file would leave it)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.startswith("??")]


def _last_error(driver) -> str | None:
    return page_value(driver, "window.cockpit.errors.at(-1) || null")


def _shown(driver) -> str:
    return page_value(driver, "document.getElementById('message').hidden ? '' : document.getElementById('message').textContent")


def test_malformed_and_oversized_messages_are_refused_and_the_server_keeps_serving():
    before = _files()
    with play_server("--red", "human", "--blue", "straight") as server, chromium() as driver:
        open_page(driver, server.url)
        oversized = json.dumps({"type": "choose", "red": "x" * 5000, "blue": "crank", "scenario": "random"})
        cases = [
            ("{oops", "error: message is not JSON"),
            ('{"type": "input", "seat": "red", "rudder": 5, "throttle": 1, "fire": false}',
             "error: input 'rudder' must be one of -1, 0, 1, got 5"),
            ('{"type": "input", "seat": "blue", "rudder": 0, "throttle": 1, "fire": false}',
             "error: seat blue is flown by straight, not by a person"),
            ('{"type": "control", "action": "time_scale", "value": 1e9}', "error: control time_scale 'value' must be a number in 0.125..8.0"),
            (oversized, f"error: message of {len(oversized)} bytes refused: at most 4096 bytes"),
        ]
        for text, message in cases:
            count = page_value(driver, "window.cockpit.errors.length")
            send_ws(driver, text)
            got = wait_until(lambda c=count: page_value(driver, "window.cockpit.errors.length") > c and _last_error(driver),
                             f"the page to show {message!r}")
            assert got.startswith(message) and "\n" not in got
            assert _shown(driver) == got
            assert message in server.output()  # the same line on the server's console
        # Still serving: states keep coming to this page, and a new page loads.
        states = page_value(driver, "window.cockpit.states")
        wait_until(lambda: page_value(driver, "window.cockpit.states") > states + 5, "more states after the bad messages")
        assert page_value(driver, "window.cockpit.connected") is True

        # Beyond what the socket reads at all: that one connection closes, the server serves on.
        send_ws(driver, "x" * 200_000)
        wait_until(lambda: page_value(driver, "window.cockpit.connected") is False, "the oversized socket to close")
        assert "connection to the server is closed" in _shown(driver)
        open_page(driver, server.url)
        assert server.state()["type"] == "state"
        assert server.proc.poll() is None
    assert _files() == before


def test_unknown_agents_and_checkpoints_that_do_not_load_are_refused_in_the_page(tmp_path):
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"PK\x03\x04 not really a checkpoint")
    before = _files()
    with play_server("--red", "human", "--blue", "crank") as server, chromium() as driver:
        open_page(driver, server.url)
        driver.find_element("id", "menu-toggle").click()
        for spec, message in [("nosuch", "error: unknown agent 'nosuch': expected one of"),
                              (str(damaged), f"error: checkpoint {damaged} is truncated or corrupt"),
                              ("no_such_pkg.mod:Agent", "error: cannot import")]:
            field = driver.find_element("id", "blue-spec")
            field.clear()
            field.send_keys(spec)
            count = page_value(driver, "window.cockpit.errors.length")
            driver.find_element("id", "choose").click()
            got = wait_until(lambda c=count: page_value(driver, "window.cockpit.errors.length") > c and _last_error(driver),
                             f"the refusal of {spec!r}")
            assert got.startswith(message), got
            assert "\n" not in got
        # The fight goes on as it was.
        assert server.state()["seats"]["blue"]["spec"] == "crank"
        assert page_value(driver, "window.cockpit.connected") is True
    assert _files() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.pt"]


def test_follow_skips_a_damaged_checkpoint_and_flies_the_next_good_one(tmp_path):
    from learner import ActionSpec, PPOConfig, PPOLearner
    from learner.checkpoint import save_checkpoint
    from sim import SimConfig
    from sim.layout import ObsLayout

    layout = ObsLayout.from_config(SimConfig())
    learner = PPOLearner(PPOConfig(hidden_sizes=(16,)), layout.size, ActionSpec.for_sim(SimConfig()),
                         obs_layout=layout.metadata())
    checkpoints = tmp_path / "run" / "checkpoints"
    first = save_checkpoint(checkpoints, learner)
    with play_server("--red", "straight", "--follow", str(tmp_path / "run"), "--max-time", "1") as server, \
            chromium() as driver:
        open_page(driver, server.url)
        assert server.state()["seats"]["blue"]["source"] == str(first)
        damaged = checkpoints / "ckpt_000000005.pt"
        damaged.write_bytes(first.read_bytes()[:300])
        got = wait_until(lambda: _last_error(driver), "the damaged checkpoint's message in the page")
        assert got.startswith(f"error: --follow: checkpoint {damaged} is truncated or corrupt")
        assert got.endswith(f"(still flying {first})")
        wait_until(lambda: "error: --follow: checkpoint" in server.output(), "the same line on the console")

        learner.policy_version = 9
        good = save_checkpoint(checkpoints, learner)
        wait_until(lambda: server.state()["seats"]["blue"].get("source") == str(good), "the new checkpoint to fly", 120)
        events = page_value(driver, "window.cockpit.seatEvents")
        assert {"side": "blue", "spec": str(good)} in events
        assert server.output().count("error: --follow") == 1  # reported once, not on every poll


def test_sharing_the_page_with_the_network_warns():
    with play_server("--host", "0.0.0.0", "--red", "straight") as server:
        port = server.url.rstrip("/").rsplit(":", 1)[1]
        wait_until(lambda: "warning: the page on" in server.output(), "the warning")
        assert (f"warning: the page on 0.0.0.0:{port} is open to the network: anyone who reaches it can watch "
                "and fly the fight") in server.output()
        assert server.state()["type"] == "state"
