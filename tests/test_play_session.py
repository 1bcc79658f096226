"""The cockpit's server side without a browser: message checks, the fight a session steps,
seats, following a run's checkpoints, the command line's errors and the port fallback."""

from __future__ import annotations

import asyncio
import json
import math
import socket

import pytest
import torch

from pipeline.play.follow import Follower
from pipeline.play.protocol import MAX_MESSAGE_BYTES, ProtocolError, parse_message
from pipeline.play.seats import AgentSeat, HumanSeat, build_seat
from pipeline.play.session import PLAY_STEP_S, Session, build_lineup, play_config
from sim import SimConfig


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- protocol

def test_good_messages_parse():
    m = parse_message('{"type": "input", "seat": "blue", "rudder": -1, "throttle": 0.5, "fire": true, "seq": 7}')
    assert (m.type, m.fields) == ("input", {"seat": "blue", "rudder": -1.0, "throttle": 0.5, "fire": True, "seq": 7})
    assert parse_message('{"type": "control", "action": "time_scale", "value": 2}').fields == {"action": "time_scale", "value": 2.0}
    assert parse_message('{"type": "take_seat", "seat": "auto"}').fields == {"seat": "auto"}
    choose = parse_message('{"type": "choose", "red": " human ", "blue": "crank", "scenario": "head_on"}')
    assert choose.fields == {"red": "human", "blue": "crank", "scenario": "head_on"}


@pytest.mark.parametrize("text, message", [
    ("{not json", "message is not JSON"),
    ("[1, 2]", "message must be a JSON object, got list"),
    ('{"type": "fly"}', 'unknown message type "fly": expected one of input, control, take_seat, choose, seek'),
    ('{"type": "input", "seat": "red", "rudder": 2, "throttle": 1, "fire": false}',
     "input 'rudder' must be one of -1, 0, 1, got 2"),
    ('{"type": "input", "seat": "red", "rudder": true, "throttle": 1, "fire": false}',
     "input 'rudder' must be one of -1, 0, 1, got true"),
    ('{"type": "input", "seat": "green", "rudder": 0, "throttle": 1, "fire": false}',
     'input \'seat\' must be one of "red", "blue", got "green"'),
    ('{"type": "input", "seat": "red", "rudder": 0, "throttle": 1, "fire": 1}', "input 'fire' must be true or false, got 1"),
    ('{"type": "input", "seat": "red", "rudder": 0, "throttle": 1, "fire": false, "seq": -1}',
     "input 'seq' must be an integer in 0..2^53, got -1"),
    ('{"type": "input", "seat": "red", "rudder": 0, "throttle": 1, "fire": false, "x": 1}',
     "input message: unknown field(s) x; allowed: type, seat, rudder, throttle, fire, seq"),
    ('{"type": "control", "action": "time_scale", "value": 1000}', "control time_scale 'value' must be a number in 0.125..8.0, got 1000"),
    ('{"type": "control", "action": "rewind"}', "control 'action' must be one of"),
    ('{"type": "choose", "red": "", "blue": "crank", "scenario": "random"}', "choose 'red' must be a non-empty string"),
    ('{"type": "take_seat", "seat": 1}', "take_seat 'seat' must be one of"),
])
def test_bad_messages_are_refused_with_one_line(text, message):
    with pytest.raises(ProtocolError) as info:
        parse_message(text)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_an_oversized_message_is_refused_unread():
    text = json.dumps({"type": "choose", "red": "x" * MAX_MESSAGE_BYTES, "blue": "crank", "scenario": "random"})
    with pytest.raises(ProtocolError, match=rf"message of {len(text)} bytes refused: at most {MAX_MESSAGE_BYTES} bytes"):
        parse_message(text)


# ---------------------------------------------------------------- the fight

def test_play_steps_are_physics_steps_of_the_trained_sim():
    config = play_config(SimConfig(obs_reach=True, max_time_s=120.0), "head_on")
    assert (config.dt_s, config.decision_dt_s, config.obs_reach, config.max_time_s) == (PLAY_STEP_S, PLAY_STEP_S, True, 120.0)
    with pytest.raises(ValueError, match="unknown scenario 'dogfight': expected one of random, head_on"):
        play_config(SimConfig(), "dogfight")


def test_a_human_seat_turns_its_fighter_and_fires():
    session = Session(build_lineup("human", "straight", "head_on"))
    red = session.human_seat("red")
    assert isinstance(red, HumanSeat) and session.human_seat("blue") is None
    red.controls.rudder = 1.0
    for _ in range(10):
        session.step()
    heading = session.frame()["fighters"][0]["heading"]
    assert heading > 0.05  # positive rudder turns left: counter-clockwise
    red.controls.rudder, red.controls.fire = -1.0, True
    for _ in range(10):
        session.step()
    frame = session.frame()
    assert frame["fighters"][0]["heading"] < heading
    assert frame["fighters"][0]["missiles_left"] == 5
    assert [m["side"] for m in frame["missiles"]] == ["red"]
    assert [e["kind"] for e in session.take_events()][:2] == ["round", "launch"]


def test_rounds_end_with_a_result_and_the_score_carries_on():
    session = Session(build_lineup("straight", "straight", "head_on", max_time_s=1.0))
    for _ in range(int(1.0 / PLAY_STEP_S)):
        assert session.result is None
        session.step()
    assert session.result == {"type": "result", "round": 1, "winner": "draw", "reason": "time_limit", "t": 1.0,
                              "score": {"red": 0, "blue": 0, "draws": 1, "rounds": 1}}
    frozen = session.frame()
    session.step()  # the last frame stays while the result is shown
    assert session.frame()["fighters"] == frozen["fighters"] and session.frame()["round"] == 1
    session.restart()
    assert session.result is None and session.frame()["round"] == 2 and session.frame()["t"] == 0.0
    assert session.score.draws == 1


def test_pause_stops_the_clock():
    session = Session(build_lineup("straight", "crank", "random"))
    session.paused = True
    session.step()
    assert session.steps == 0 and session.frame()["t"] == 0.0


def test_an_agent_decides_as_often_as_it_was_trained_to():
    lineup = build_lineup("random", "human", "random")
    seat = lineup.seats[0]
    assert isinstance(seat, AgentSeat) and seat.decide_every == round(SimConfig().decision_dt_s / PLAY_STEP_S) == 10
    session = Session(lineup)
    obs = session._obs[0, 0]
    actions = [seat.action(obs, step, "discrete").tolist() for step in range(40)]
    for block in range(4):
        assert all(a == actions[block * 10] for a in actions[block * 10:(block + 1) * 10])
    assert len({tuple(actions[b * 10]) for b in range(4)}) > 1


@pytest.mark.parametrize("red, blue, message", [
    ("nosuch", "crank", "unknown agent 'nosuch'"),
    ("human", "", "blue seat: agent spec must be a non-empty string"),
    ("human", "no/such/run", "no checkpoint at no/such/run"),
])
def test_a_bad_seat_is_one_line(red, blue, message):
    with pytest.raises(ValueError) as info:
        build_lineup(red, blue, "random")
    assert message in str(info.value) and "\n" not in str(info.value)


# ---------------------------------------------------------------- follow

def _learner(version: int):
    from learner import ActionSpec, PPOConfig, PPOLearner
    from sim.layout import ObsLayout

    layout = ObsLayout.from_config(SimConfig())
    learner = PPOLearner(PPOConfig(hidden_sizes=(16,)), layout.size, ActionSpec.for_sim(SimConfig()),
                         obs_layout=layout.metadata())
    learner.policy_version = version
    return learner


def test_follow_takes_each_new_checkpoint_once_it_is_whole(tmp_path):
    from learner.checkpoint import save_checkpoint

    run = tmp_path / "run"
    first = save_checkpoint(run / "checkpoints", _learner(1))
    follower = Follower(str(run), "blue", poll_s=0.0)
    assert follower.current == first and follower.poll() is None
    second = save_checkpoint(run / "checkpoints", _learner(2))
    assert follower.poll() is None  # seen once: not yet known to be whole
    assert follower.poll() == second
    seat = build_seat(str(second), 1, play_config(SimConfig(), "random"), 10)
    assert isinstance(seat, AgentSeat) and seat.source == str(second)
    follower.loaded(second)
    assert follower.poll() is None and follower.current == second

    # A newer file that does not load is reported once and left until it changes.
    damaged = run / "checkpoints" / "ckpt_000000003.pt"
    damaged.write_bytes(second.read_bytes()[:200])
    assert follower.poll() is None and follower.poll() == damaged
    with pytest.raises(ValueError, match=r"ckpt_000000003\.pt"):
        build_seat(str(damaged), 1, play_config(SimConfig(), "random"), 10)
    follower.failed(damaged)
    assert follower.poll() is None and follower.poll() is None and follower.current == second
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert before == ["ckpt_000000001.pt", "ckpt_000000002.pt", "ckpt_000000003.pt", "latest.pt"]


def test_a_run_without_checkpoints_cannot_be_followed(tmp_path):
    with pytest.raises(ValueError, match="no checkpoint in"):
        Follower(str(tmp_path), "blue")


# ---------------------------------------------------------------- command line and port

def test_command_line_errors_are_one_line(capsys, tmp_path):
    from pipeline.play.command import run

    damaged = tmp_path / "bad.pt"
    damaged.write_bytes(b"not a checkpoint")
    for argv, message in [
        (["--blue", "nosuch"], "error: unknown agent 'nosuch'"),
        (["--blue", str(damaged)], f"error: checkpoint {damaged} is truncated or corrupt"),
        (["--scenario", "dogfight"], "error: argument --scenario: invalid choice"),
        (["--port", "70000"], "error: --port must be in 0..65535, got 70000"),
        (["--follow", str(tmp_path), "--blue", "crank"], "error: --follow flies the blue seat: drop --blue, or pass --follow-seat red"),
        (["--follow", str(tmp_path)], f"error: no checkpoint in {tmp_path}"),
    ]:
        with pytest.raises(SystemExit) as info:
            run(argv)
        err = capsys.readouterr().err
        assert info.value.code == 2 and err.startswith(message) and err.count("\n") == 1, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pt"]


def test_a_busy_port_falls_back_and_says_so(caplog):
    pytest.importorskip("aiohttp")
    from aiohttp import web

    from pipeline.play.site import ServeError, start_site

    async def main() -> tuple[int, int]:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            runner, taken = await start_site(web.Application(), "127.0.0.1", port)
            await runner.cleanup()
            return port, taken

    with caplog.at_level("WARNING"):
        port, taken = asyncio.run(main())
    assert taken != port and math.isfinite(taken)
    assert f"port {port} on 127.0.0.1 is busy; serving on 127.0.0.1:{taken} instead" in caplog.text

    async def unreachable() -> None:
        await start_site(web.Application(), "192.0.2.1", 0)

    with pytest.raises(ServeError, match=r"^cannot serve the page on 192\.0\.2\.1:0: cannot assign requested address \(--host must be an address of this machine"):
        asyncio.run(unreachable())


def test_only_this_machine_counts_as_local():
    pytest.importorskip("aiohttp")
    from pipeline.play.server import is_local

    assert is_local("127.0.0.1") and is_local("::1") and is_local("127.0.0.2")
    assert not is_local("192.168.1.20") and not is_local("10.0.0.1") and not is_local(None) and not is_local("host")


def test_a_plug_in_that_misbehaves_pauses_the_fight_and_the_server_goes_on():
    """A real server on a real socket, in this process: an agent whose actions are out of range
    pauses the fight with one line to every page; a plug-in whose constructor raises is refused
    when chosen; the server answers on."""
    pytest.importorskip("aiohttp")
    from aiohttp.test_utils import TestClient, TestServer

    from pipeline.play.server import PlayServer

    lineup = build_lineup("human", "tests.play_agents:OutOfRangeAgent", "head_on")
    server = PlayServer(Session(lineup))

    async def main() -> tuple[list[dict], dict]:
        async with TestClient(TestServer(server.app())) as client:
            ws = await client.ws_connect("/ws")
            seen: list[dict] = []
            while not any(m["type"] == "error" for m in seen):
                seen.append(await ws.receive_json(timeout=60))
            await ws.send_json({"type": "choose", "red": "human", "blue": "tests.plugins_faulty:BrokenConstructor",
                                "scenario": "random"})
            while sum(m["type"] == "error" for m in seen) < 2:
                seen.append(await ws.receive_json(timeout=60))
            stats = await (await client.get("/stats.json")).json()
            return seen, stats

    seen, stats = asyncio.run(main())
    errors = [m["message"] for m in seen if m["type"] == "error"]
    assert errors == [
        "error: the fight is paused: agent 'tests.play_agents:OutOfRangeAgent' returned discrete actions out of "
        "range (indices must be rudder in 0..2, throttle in 0..2, fire in 0..1) (choose another fight)",
        "error: RuntimeError: cannot build this opponent",
    ]
    assert stats["paused"] is True and server.session.lineup.specs == ("human", "tests.play_agents:OutOfRangeAgent")


def test_a_page_that_leaves_lets_go_of_its_seat_and_controls():
    pytest.importorskip("aiohttp")
    from aiohttp.test_utils import TestClient, TestServer

    from pipeline.play.server import PlayServer

    server = PlayServer(Session(build_lineup("human", "straight", "head_on")))
    red = server.session.human_seat("red")
    assert red is not None

    async def wait_for(condition) -> None:
        for _ in range(6000):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("timed out")

    async def main() -> list[dict]:
        async with TestClient(TestServer(server.app())) as client:
            first = await client.ws_connect("/ws")
            await first.send_json({"type": "take_seat", "seat": "auto"})
            await first.send_json({"type": "input", "seat": "red", "rudder": 1, "throttle": 0.5, "fire": False, "seq": 3})
            await wait_for(lambda: red.controls.rudder == 1.0)
            second = await client.ws_connect("/ws")
            await second.send_json({"type": "take_seat", "seat": "red"})
            replies = [await second.receive_json(timeout=60)]
            while replies[-1]["type"] != "error":
                replies.append(await second.receive_json(timeout=60))
            await first.close()
            await wait_for(lambda: red.controls.rudder == 0.0 and len(server.viewers) == 1)
            await second.send_json({"type": "take_seat", "seat": "red"})
            while (message := await second.receive_json(timeout=60))["type"] != "seats":
                pass
            return [*replies, message]

    messages = asyncio.run(main())
    assert (red.controls.rudder, red.controls.throttle, red.controls.seq) == (0.0, 1.0, 3)
    assert {"type": "error", "message": "error: seat red is taken by another viewer"} in messages
    assert messages[-1] == {"type": "seats", "held": ["red"]}


def test_the_page_offers_the_champions_and_ace3_gets_the_sim_it_knows():
    """The agents a page offers include the packaged champions; choosing ``ace3``, which reads
    the reach block and a trace, sets the fight up on that simulator (the other seat reads the
    frame before them)."""
    pytest.importorskip("aiohttp")
    from aiohttp.test_utils import TestClient, TestServer

    from agents.champions import CHAMPIONS
    from pipeline.play.server import PlayServer

    server = PlayServer(Session(build_lineup("human", "straight", "head_on")))
    assert not server.session.lineup.config.obs_reach

    async def main() -> dict:
        async with TestClient(TestServer(server.app())) as client:
            ws = await client.ws_connect("/ws")
            while (hello := await ws.receive_json(timeout=60))["type"] != "hello":
                pass
            await ws.send_json({"type": "choose", "red": "ace2", "blue": "ace3", "scenario": "head_on"})
            for _ in range(6000):
                if server.session.lineup.specs == ("ace2", "ace3"):
                    break
                await asyncio.sleep(0.01)
            return hello

    hello = asyncio.run(main())
    assert set(CHAMPIONS) <= set(hello["agents"]) and {"ace", "ace2", "ace3"} <= set(CHAMPIONS)
    config = server.session.lineup.config
    assert server.session.lineup.specs == ("ace2", "ace3")
    assert config.obs_reach and config.obs_trace_s == 20.0
