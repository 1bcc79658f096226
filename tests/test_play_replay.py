"""Replays in the page, server side (pipeline/play/replays.py): a recorded fight's timeline and
its moments as state messages, and damaged or oversized files refused with one clear line."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest

from pipeline.play import replays
from pipeline.play.replays import ReplayShelf
from sim.replay.format import ReplayError, load_replay
from tests.replay_damage import record_fight


@pytest.fixture(scope="module")
def fight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded head-on fight: shooter (red) launches, hits and kills pursuit (blue)."""
    return record_fight(tmp_path_factory.mktemp("fight"), episodes=1)


def test_timeline_marks_the_recorded_events(fight: Path) -> None:
    opened = ReplayShelf().open_path(fight)
    info = opened.info()
    replay = load_replay(fight)
    assert info["type"] == "replay_info" and info["agents"] == {"red": "shooter", "blue": "pursuit"}
    assert info["frames"] == replay.num_frames
    assert info["duration"] == pytest.approx(float(replay.arrays["t_s"][-1]))
    kinds = [e["kind"] for e in info["events"]]
    assert kinds[0] == "launch" and "hit" in kinds and "kill" in kinds and kinds[-1] == "end"
    launch = next(e for e in replay.events if e["kind"] == "launch")
    assert info["events"][0]["t"] == pytest.approx(launch["t_s"]) and info["events"][0]["side"] == "red"


def test_a_moment_is_the_recorded_frame_at_or_before_it(fight: Path) -> None:
    opened = ReplayShelf().open_path(fight)
    replay = load_replay(fight)
    t = replay.arrays["t_s"]
    i = len(t) // 2
    for asked in (float(t[i]), float(t[i]) + 0.3 * float(t[i + 1] - t[i])):
        state = opened.state(asked, "blue")
        assert state["type"] == "state" and state["replay"]["frame"] == i
        assert state["t"] == pytest.approx(float(t[i]))
        for s, f in enumerate(state["fighters"]):
            assert f["x"] == pytest.approx(float(replay.arrays["f_x"][i, s]), abs=0.01)
            assert f["y"] == pytest.approx(float(replay.arrays["f_y"][i, s]), abs=0.01)
            assert f["missiles_left"] == int(replay.arrays["f_ammo"][i, s])
        flying = int(replay.arrays["m_active"][i].sum())
        assert len(state["missiles"]) == flying
        graph = state["spacetime"]
        assert graph is not None and graph["seat"] == "blue"
        assert graph["origin"] == [pytest.approx(float(replay.arrays["f_x"][i, 1])),
                                   pytest.approx(float(replay.arrays["f_y"][i, 1]))]
        assert state["hud"]["escape_margin_s"] == graph["hud"]["escape_margin_s"]
    assert opened.state(-5.0, "red")["replay"]["frame"] == 0
    last = opened.state(1e6, "red")
    assert last["replay"]["frame"] == len(t) - 1 and last["spacetime"] is None  # blue is destroyed
    assert any(e["kind"] == "kill" for e in last["events"])
    with pytest.raises(ValueError, match="seat must be one of red, blue"):
        opened.state(1.0, "green")


def _leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("midrange-replay-*")}


def test_a_sent_file_is_read_and_a_damaged_one_refused(fight: Path) -> None:
    shelf = ReplayShelf()
    before = _leftovers()
    data = fight.read_bytes()
    opened = shelf.open_bytes(data, "mine.replay")
    assert shelf.get(opened.name) is opened and opened.info()["file"] == "mine.replay"
    assert np.array_equal(opened.replay.arrays["f_x"], load_replay(fight).arrays["f_x"])
    with pytest.raises(ReplayError) as cut:
        shelf.open_bytes(data[: len(data) // 2], "cut\x1b[31m.replay")
    message = str(cut.value)
    assert message.startswith("cut\\x1b[31m.replay: truncated") and "\n" not in message
    with pytest.raises(ReplayError, match="not a replay file"):
        shelf.open_bytes(b"hello", "hello.txt")
    assert _leftovers() == before  # nothing of the files stays on disk
    with pytest.raises(KeyError, match="no open replay"):
        shelf.get("nope")


def test_oversized_files_and_a_full_shelf(fight: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replays, "UPLOAD_LIMIT_BYTES", 1000)
    shelf = ReplayShelf()
    with pytest.raises(ReplayError, match=r"big.replay: \d+ bytes, more than the 0 MiB"):
        shelf.open_bytes(fight.read_bytes(), "big.replay")
    names = [shelf.open_path(fight).name for _ in range(replays.SHELF_SIZE + 1)]
    with pytest.raises(KeyError):
        shelf.get(names[0])
    assert shelf.get(names[-1]).info()["frames"] > 0
    assert math.isfinite(shelf.get(names[-1]).info()["duration"])


@pytest.mark.parametrize("text, message", [
    ('{"type": "seek", "replay": "", "t": 1, "seat": "red"}', "seek 'replay' must be the name of an open replay"),
    ('{"type": "seek", "replay": 7, "t": 1, "seat": "red"}', "seek 'replay' must be the name of an open replay"),
    ('{"type": "seek", "replay": "ab", "t": "1", "seat": "red"}', "seek 't' must be a number of seconds, got \"1\""),
    ('{"type": "seek", "replay": "ab", "t": true, "seat": "red"}', "seek 't' must be a number of seconds, got true"),
    ('{"type": "seek", "replay": "ab", "t": 1e300, "seat": "red"}', "seek 't' must be a number of seconds"),
    ('{"type": "seek", "replay": "ab", "t": 1, "seat": "green"}', "seek 'seat' must be one of \"red\", \"blue\""),
    ('{"type": "seek", "replay": "ab", "t": 1, "seat": "red", "frame": 3}', "seek message: unknown field(s) frame"),
])
def test_bad_seek_messages_are_refused_with_one_line(text: str, message: str) -> None:
    from pipeline.play.protocol import ProtocolError, parse_message

    with pytest.raises(ProtocolError) as refused:
        parse_message(text)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
    good = parse_message('{"type": "seek", "replay": "ab12", "t": 3, "seat": "blue"}')
    assert good.type == "seek" and good.fields == {"replay": "ab12", "t": 3.0, "seat": "blue"}


def test_a_damaged_replay_on_the_command_line_is_one_line_and_exit_2(fight: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    cut = tmp_path / "cut.replay"
    cut.write_bytes(fight.read_bytes()[:300])
    before = sorted(p.name for p in tmp_path.iterdir())
    done = subprocess.run([sys.executable, "-m", "pipeline.play", "--port", "0", "--replay", str(cut)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {cut}: truncated"), done.stderr
    assert "cockpit:" not in done.stdout  # nothing was served
    assert sorted(p.name for p in tmp_path.iterdir()) == before
