"""python -m pipeline.replay: PNG, GIF, MP4 and Tacview ACMI outputs of a recorded fight; the
ACMI is read back by a small reader written here, independent of the writer."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.replay import OUTPUTS, Output, main
from sim.replay.format import Replay, load_replay
from tests.full_disk import run_on_full_disk
from tests.replay_damage import record_fight

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def replay_path(tmp_path_factory) -> Path:
    """A head-on fight of shooter (red) against pursuit: a launch, a hit and a kill."""
    return record_fight(tmp_path_factory.mktemp("replays"))


# ---------------------------------------------------------------- an independent ACMI reader

R_EARTH = 6_371_000.0


def read_acmi(text: str) -> dict:
    """Parse ACMI 2.2 text: header, global properties, per-object samples, removals, events."""
    lines = text.split("\n")
    assert lines[0] == "FileType=text/acmi/tacview", lines[0]
    assert lines[1] == "FileVersion=2.2", lines[1]
    glob: dict[str, str] = {}
    objects: dict[str, dict] = {}
    events: list[tuple[float, str, list[str]]] = []
    t = None
    for line in lines[2:]:
        if not line:
            continue
        if line.startswith("#"):
            t = float(line[1:])
            continue
        if line.startswith("-"):
            objects[line[1:]]["removed"] = t
            continue
        obj_id, _, rest = line.partition(",")
        # Split on commas not escaped with a backslash.
        props, cur, esc = [], "", False
        for ch in rest:
            if esc:
                cur, esc = cur + ch, False
            elif ch == "\\":
                esc = True
            elif ch == ",":
                props.append(cur)
                cur = ""
            else:
                cur += ch
        props.append(cur)
        kv = dict(p.split("=", 1) for p in props)
        if obj_id == "0":
            if "Event" in kv:
                kind, *args = kv["Event"].split("|")
                events.append((t, kind, args))
            else:
                glob.update(kv)
            continue
        int(obj_id, 16)  # ids are hexadecimal
        o = objects.setdefault(obj_id, {"samples": [], "props": {}, "removed": None})
        for k, v in kv.items():
            if k == "T":
                lon, lat, alt, roll, _pitch, yaw = (float(x) for x in v.split("|"))
                o["samples"].append((t, lon, lat, alt, roll, yaw))
            else:
                o["props"][k] = v
    return {"globals": glob, "objects": objects, "events": events}


def plane_xy(acmi: dict, lon: float, lat: float) -> tuple[float, float]:
    lat0 = float(acmi["globals"]["ReferenceLatitude"])
    return (math.radians(lon) * R_EARTH * math.cos(math.radians(lat0)), math.radians(lat) * R_EARTH)


def test_acmi_opens_as_tacview_text_and_holds_the_fight(replay_path, tmp_path):
    out = tmp_path / "fight.acmi"
    main([str(replay_path), "--acmi", str(out)])
    replay = load_replay(replay_path)
    acmi = read_acmi(out.read_text(encoding="utf-8"))
    g = acmi["globals"]
    assert {"ReferenceTime", "ReferenceLongitude", "ReferenceLatitude", "Title"} <= set(g)
    fighters = {k: o for k, o in acmi["objects"].items() if o["props"].get("Type") == "Air+FixedWing"}
    missiles = {k: o for k, o in acmi["objects"].items() if o["props"].get("Type") == "Weapon+Missile"}
    assert len(fighters) == 2
    by_color = {o["props"]["Color"]: o for o in fighters.values()}
    a = replay.arrays
    for side, color in enumerate(("Red", "Blue")):
        samples = by_color[color]["samples"]
        for t, lon, lat, alt, _roll, yaw in samples[::7]:
            i = int(np.argmin(np.abs(a["t_s"] - t)))
            x, y = plane_xy(acmi, lon, lat)
            assert x == pytest.approx(a["f_x"][i, side], abs=2.0)
            assert y == pytest.approx(a["f_y"][i, side], abs=2.0)
            heading = (90 - math.degrees(math.atan2(a["f_vy"][i, side], a["f_vx"][i, side]))) % 360
            assert min(abs(yaw - heading), 360 - abs(yaw - heading)) < 0.2
            assert alt > 0
    # Every launch is a missile object, parented to its fighter, first seen at its launch time.
    launches = [e for e in replay.events if e["kind"] == "launch"]
    assert len(missiles) == len(launches) >= 1
    for e in launches:
        (m,) = [o for o in missiles.values()
                if o["props"]["Parent"] == next(k for k, f in fighters.items()
                                                if f["props"]["Color"] == ("Red", "Blue")[e["side"]])
                and o["samples"][0][0] == pytest.approx(e["t_s"], abs=1e-6)]
        assert m["removed"] is not None
    # The fighter that was killed is destroyed (an event) and removed at the fight's end time.
    kill = next(e for e in replay.events if e["kind"] == "kill")
    victim = next(k for k, f in fighters.items() if f["props"]["Color"] == ("Red", "Blue")[kill["side"]])
    destroyed = [(t, args) for t, kind, args in acmi["events"] if kind == "Destroyed"]
    assert any(args[0] == victim and t == pytest.approx(kill["t_s"]) for t, args in destroyed)
    assert fighters[victim]["removed"] == pytest.approx(kill["t_s"])
    hit = next(e for e in replay.events if e["kind"] == "hit")
    assert any(int(args[0], 16) == 0x1000 + hit["missile"] for _, args in destroyed)


def test_png_gif_and_mp4_in_one_call(replay_path, tmp_path):
    pil = pytest.importorskip("PIL.Image")
    pytest.importorskip("matplotlib")
    paths = {k: tmp_path / f"fight.{k}" for k in ("png", "gif", "mp4")}
    written = main([str(replay_path), "--png", str(paths["png"]), "--gif", str(paths["gif"]),
                    "--fps", "10", "--speed", "5", "--size", "320x240"]
                   + (["--mp4", str(paths["mp4"])] if _has_ffmpeg() else []))
    assert set(written) >= {"--png", "--gif"}
    replay = load_replay(replay_path)
    with pil.open(paths["png"]) as img:
        assert img.format == "PNG" and img.size[0] > 500
    with pil.open(paths["gif"]) as img:
        # 5 sim seconds per second at 10 pictures per second: one picture per 0.5 s decision.
        assert img.format == "GIF" and img.size == (320, 240)
        assert img.n_frames == replay.num_frames
    if _has_ffmpeg():
        import imageio_ffmpeg

        reader = imageio_ffmpeg.read_frames(str(paths["mp4"]))
        meta = next(reader)
        assert tuple(meta["size"]) == (320, 240)
        assert sum(1 for _ in reader) == replay.num_frames
    assert not list(tmp_path.glob(".*.tmp"))


def _has_ffmpeg() -> bool:
    try:
        import imageio_ffmpeg

        imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError):
        return False
    return True


def test_one_more_output_plugs_into_the_table(replay_path, tmp_path):
    """A new output is one more row: its flag, its own options, its writer."""
    seen = {}

    def add_at(p: argparse.ArgumentParser) -> None:
        p.add_argument("--at", type=float, default=0.0)

    def write(replay: Replay, path: Path, args: argparse.Namespace) -> str:
        i = int(np.argmin(np.abs(replay.arrays["t_s"] - args.at)))
        seen["frame"] = i
        path.write_text(f"{replay.arrays['f_x'][i, 0]}")
        return "a number"

    extra = Output("--fighter-x", "red's x at --at", (), write, add_at)
    main([str(replay_path), "--fighter-x", str(tmp_path / "x.txt"), "--at", "5"], outputs=(*OUTPUTS, extra))
    assert seen["frame"] == 10
    missing = Output("--needs-more", "x", (("no_such_module_here", "pip install more"),), write)
    with pytest.raises(ImportError, match="--needs-more needs the Python package 'no_such_module_here'"):
        main([str(replay_path), "--needs-more", str(tmp_path / "y")], outputs=(missing,))
    assert not (tmp_path / "y").exists()


def test_cli_summary_and_bad_files(replay_path, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "pipeline.replay", str(replay_path)], cwd=ROOT,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "launch" in ok.stdout and "kill" in ok.stdout and "outcome:" in ok.stdout
    cut = tmp_path / "cut.replay"
    cut.write_bytes(replay_path.read_bytes()[:-10])
    bad = subprocess.run([sys.executable, "-m", "pipeline.replay", str(cut), "--acmi", str(tmp_path / "a.acmi")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: ") and "truncated" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "a.acmi").exists()
    nodir = subprocess.run([sys.executable, "-m", "pipeline.replay", str(replay_path), "--png",
                            str(tmp_path / "missing" / "x.png")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert nodir.returncode == 2 and "does not exist" in nodir.stderr


def test_full_disk_names_the_output_and_says_why_in_one_line(replay_path, tmp_path):
    """A full disk: the PNG's path and ``no space left on device``; an MP4 whose ffmpeg fails:
    one line with ffmpeg's last message (it printed a dozen lines of ffmpeg and exited 0, the
    file cut short); a standard output on /dev/full is named (it said ``cannot write None``)."""
    pytest.importorskip("matplotlib")
    tiny = tmp_path / "tiny"
    p = run_on_full_disk(tiny, "pipeline.replay", [str(replay_path), "--png", f"{tiny}/f.png"])
    assert p.returncode == 1
    assert p.stderr == f"error: cannot write {tiny}/f.png: no space left on device\n"
    if _has_ffmpeg():
        p = run_on_full_disk(tmp_path / "tiny2", "pipeline.replay", [str(replay_path), "--mp4", f"{tmp_path}/tiny2/f.mp4",
                                                "--size", "320x240"])
        assert p.returncode == 1
        assert p.stderr.count("\n") == 1, p.stderr
        assert p.stderr.startswith(f"error: cannot write {tmp_path}/tiny2/f.mp4: ffmpeg exited with status ")
        assert "no space left on device" in p.stderr
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "pipeline.replay", str(replay_path), "--acmi",
                            str(tmp_path / "f.acmi")], cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=300)
    assert p.returncode == 1
    assert p.stderr == "error: cannot write standard output: no space left on device\n"
