"""Recording (sim.replay.recorder) and the replay file (sim.replay.format): frames equal the sim's
state, events match its counts, the sim's results are unchanged, and damaged files are refused."""

from __future__ import annotations

from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch

from agents import make_agent
from pipeline.evaluate import main as evaluate_main
from pipeline.evaluation.recording import replay_header
from sim import BatchedSim, SimConfig
from sim.replay.format import (
    ReplayError,
    ReplayReader,
    ReplayWriter,
    frame_shapes,
    load_replay,
    read_header,
)
from sim.replay.recorder import Recorder


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _agents(sim: BatchedSim) -> tuple:
    cfg = sim.config
    return tuple(make_agent(name, sim.num_envs, sim.layout, sim_config=cfg) for name in ("shooter", "crank"))


def _play(sim: BatchedSim, steps: int, snapshots: list | None = None) -> list[torch.Tensor]:
    red, blue = _agents(sim)
    obs = sim.reset()
    everyone = torch.ones(sim.num_envs, dtype=torch.bool)
    red.reset(everyone)
    blue.reset(everyone)
    seen = [obs.clone()]
    for _ in range(steps):
        out = sim.step(torch.stack([red.act(obs[:, 0]), blue.act(obs[:, 1])], dim=1))
        red.reset(out.done)
        blue.reset(out.done)
        obs = out.obs
        seen.append(out.final_obs.clone())
        if snapshots is not None:
            snapshots.append((out.done.clone(), out.winner.clone(), out.launches.clone()))
    return seen


def _record(tmp_path: Path, num_envs: int, env_ids: list[int], steps: int, chunk_steps: int,
            config: SimConfig) -> tuple[BatchedSim, Recorder, list, list]:
    sim = BatchedSim(num_envs, config, seed=3)

    def open_episode(env: int, episode: int) -> ReplayWriter:
        return ReplayWriter(tmp_path / f"env{env}-ep{episode}.replay",
                            replay_header(sim, env, episode, "shooter", "crank"))

    recorder = Recorder(sim, env_ids, open_episode, chunk_steps=chunk_steps)
    snapshots: list = []
    seen = _play(sim, steps, snapshots)
    recorder.close()
    return sim, recorder, seen, snapshots


def test_recording_leaves_the_sim_unchanged_and_frames_match_its_state(tmp_path):
    config = SimConfig(max_time_s=40.0)
    steps = 130  # several episodes of 40 s at most: auto-resets inside chunks
    sim, recorder, seen, snapshots = _record(tmp_path, 4, [1, 3], steps, 7, config)
    plain = _play(BatchedSim(4, config, seed=3), steps)
    assert all(torch.equal(a, b) for a, b in zip(seen, plain, strict=True))
    assert recorder.replays_written, "no episode finished"
    assert sim.observer is None
    for path in recorder.replays_written:
        replay = load_replay(path)
        env, episode = replay.header["env_index"], replay.header["episode"]
        assert env in (1, 3)
        # The steps of this episode in the run: find its end by counting done flags.
        dones = [bool(d[env]) for d, _, _ in snapshots]
        ends = [i for i, d in enumerate(dones) if d]
        first_step = 0 if episode == 0 else ends[episode - 1] + 1
        last_step = ends[episode]
        assert replay.num_frames == last_step - first_step + 2
        t = replay.arrays["t_s"]
        assert t[0] == 0 and np.allclose(np.diff(t)[:-1], config.decision_dt_s)
        # The own position in red's observation is x / arena_half_width: compare frame by frame.
        half = config.arena_half_width_m
        for k in range(1, replay.num_frames):
            obs = seen[first_step + k][env]
            assert replay.arrays["f_x"][k, 0] == pytest.approx(float(obs[0, 0]) * half, abs=0.5)
            assert replay.arrays["f_y"][k, 1] == pytest.approx(float(obs[1, 1]) * half, abs=0.5)
        launches = sum(int(snapshots[s][2][env].sum()) for s in range(first_step, last_step + 1))
        assert sum(e["kind"] == "launch" for e in replay.events) == launches
        winner = int(snapshots[last_step][1][env])
        assert replay.outcome["winner"] == {0: "red", 1: "blue", 2: "draw"}[winner]
        assert replay.events[-1]["kind"] == "end"
        kills = [e for e in replay.events if e["kind"] == "kill"]
        hits = [e for e in replay.events if e["kind"] == "hit"]
        if replay.outcome["end_reason"] == "kill":
            assert kills and hits and {h["target"] for h in hits} == {k["side"] for k in kills}
            # The hit missile ends next to its target.
            h = hits[0]
            s, slot = np.argwhere(replay.arrays["m_id"][-1] == h["missile"])[0]
            assert s == h["side"]
            miss = np.hypot(replay.arrays["m_x"][-1, s, slot] - replay.arrays["f_x"][-1, 1 - s],
                            replay.arrays["m_y"][-1, s, slot] - replay.arrays["f_y"][-1, 1 - s])
            assert miss < 1500.0
    # Nothing half-written is left behind (the last episodes were given up at close).
    assert not list(tmp_path.glob(".*.tmp"))


def test_reader_streams_the_same_frames_as_load(tmp_path):
    _, recorder, _, _ = _record(tmp_path, 2, [0], 90, 5, SimConfig(scenario="head_on"))
    path = recorder.replays_written[0]
    whole = load_replay(path)
    with ReplayReader(path) as reader:
        assert reader.header["agents"] == {"red": "shooter", "blue": "crank"}
        frames = list(reader.frames())
        assert reader.outcome == whole.outcome
    assert len(frames) == whole.num_frames
    assert np.array_equal(np.stack([f["m_x"] for f in frames]), whole.arrays["m_x"])
    assert read_header(path)["sim_config"]["scenario"] == "head_on"


def _one_replay(tmp_path: Path) -> Path:
    _, recorder, _, _ = _record(tmp_path, 1, [0], 90, 4, SimConfig(scenario="head_on"))
    return Path(recorder.replays_written[0])


def test_truncated_file_is_refused_with_a_clear_message(tmp_path):
    path = _one_replay(tmp_path)
    data = path.read_bytes()
    for cut in (len(data) - 3, len(data) // 2, 40):
        bad = tmp_path / f"cut{cut}.replay"
        bad.write_bytes(data[:cut])
        with pytest.raises(ReplayError, match="truncated"):
            load_replay(bad)
    # Whole objects, but no end record: still truncated.
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    objs = list(unpacker)
    assert objs[-1]["type"] == "end"
    no_end = tmp_path / "noend.replay"
    no_end.write_bytes(b"".join(msgpack.packb(o, use_bin_type=True) for o in objs[:-1]))
    with pytest.raises(ReplayError, match=r"truncated.*interrupted"):
        load_replay(no_end)


def test_newer_major_version_and_foreign_files_are_refused(tmp_path):
    path = _one_replay(tmp_path)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(path.read_bytes())
    objs = list(unpacker)
    objs[0]["version"] = [2, 0]
    newer = tmp_path / "newer.replay"
    newer.write_bytes(b"".join(msgpack.packb(o, use_bin_type=True) for o in objs))
    with pytest.raises(ReplayError, match=r"format 2\.0, newer than this reader"):
        read_header(newer)
    objs[0]["version"] = [1, 7]  # a newer minor version is read
    minor = tmp_path / "minor.replay"
    minor.write_bytes(b"".join(msgpack.packb(o, use_bin_type=True) for o in objs))
    assert load_replay(minor).num_frames == load_replay(path).num_frames
    other = tmp_path / "other.replay"
    other.write_bytes(msgpack.packb({"hello": 1}))
    with pytest.raises(ReplayError, match="not a replay file"):
        load_replay(other)
    with pytest.raises(ReplayError, match="cannot open"):
        load_replay(tmp_path / "missing.replay")


def test_evaluate_record_writes_replays_of_each_match(tmp_path, capsys):
    out = tmp_path / "replays"
    payload = evaluate_main(["--agent", "shooter", "--opponents", "pursuit", "--episodes", "4",
                             "--scenario", "head_on", "--record", str(out), "--record-episodes", "2"])
    files = sorted(out.glob("*.replay"))
    assert [p.name for p in files] == ["shooter-vs-pursuit-000.replay", "shooter-vs-pursuit-001.replay"]
    assert payload["replays"] == [str(p) for p in files]
    sides = [load_replay(p).header["agents"]["red"] for p in files]
    assert sides == ["shooter", "pursuit"]  # the agent flew red once and blue once
    assert "wrote 2 replays" in capsys.readouterr().out


def test_evaluate_record_refuses_what_it_cannot_record(tmp_path):
    with pytest.raises(ValueError, match="not a --round-robin"):
        evaluate_main(["--round-robin", "straight,pursuit", "--episodes", "2", "--record", str(tmp_path / "r")])
    with pytest.raises(ValueError, match="--record-episodes must be >= 1"):
        evaluate_main(["--agent", "straight", "--episodes", "2", "--record", str(tmp_path / "r"),
                       "--record-episodes", "0"])
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        evaluate_main(["--agent", "straight", "--episodes", "2", "--record", str(tmp_path / "file")])
    assert not (tmp_path / "r").exists()


def test_unknown_event_kinds_are_dropped_only_from_a_newer_minor_version(tmp_path):
    path = _one_replay(tmp_path)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(path.read_bytes())
    objs = list(unpacker)
    objs[1]["events"].append({"t_s": 0.0, "frame": 0, "kind": "radar_lock", "side": 0})
    for version, readable in (([1, 0], False), ([1, 3], True)):
        objs[0]["version"] = version
        other = tmp_path / f"kinds-{version[1]}.replay"
        other.write_bytes(b"".join(msgpack.packb(o, use_bin_type=True) for o in objs))
        if readable:
            assert [e["kind"] for e in load_replay(other).events] == [e["kind"] for e in load_replay(path).events]
        else:
            with pytest.raises(ReplayError, match=r"block 1: an event of unknown kind 'radar_lock'"):
                load_replay(other)


def test_a_writer_refuses_a_block_larger_than_a_reader_reads(tmp_path):
    config = SimConfig()
    sim = BatchedSim(1, config, seed=0)
    n = (64 << 20) // 400  # frames of some 474 bytes: over 64 MiB in one block
    shapes = frame_shapes(config.missiles_per_fighter)
    arrays = {k: np.zeros((n, *shape), dtype=dtype) for k, (dtype, shape) in shapes.items()}
    with ReplayWriter(tmp_path / "big.replay", replay_header(sim, 0, 0, "a", "b")) as writer, \
            pytest.raises(ValueError, match="more than the 64 MiB a reader reads"):
        writer.write_frames(arrays)
    assert not list(tmp_path.iterdir())
