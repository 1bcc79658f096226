"""Hostile replays: every crafted file (tests/replay_damage.py, made from a real recorded fight)
is either read and rendered or refused with one ``error:`` line and exit status 2, by the
reader and by ``python -m pipeline.replay`` with each output; never a traceback, never a file
written for a refused replay. Memory stays bounded for a file of many empty blocks and for a
large animation."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.replay import run
from sim.replay.format import ReplayError, load_replay
from tests.replay_damage import CASES, FLIPS, crafted_replays, join, record_fight, split

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


@pytest.fixture(scope="module")
def real_replay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A head-on fight of shooter (red) against pursuit: a launch, a hit and a kill."""
    return record_fight(tmp_path_factory.mktemp("replays"))


@pytest.fixture(scope="module")
def crafted(real_replay: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("crafted")
    files = {}
    for name, data in crafted_replays(real_replay.read_bytes()).items():
        files[name] = folder / f"{name}.replay"
        files[name].write_bytes(data)
    return files


def read_outcome(path: Path) -> str:
    """``read`` or ``refused``; anything but a ReplayError propagates (a traceback)."""
    try:
        load_replay(path)
    except ReplayError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(str(path)), message
        return "refused"
    return "read"


def command(argv: list[str]) -> tuple[int, str, str]:
    """``pipeline.replay`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            run(argv)
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def check_run(name: str, argv: list[str], folder: Path, read: bool) -> str | None:
    """Run the command; what is wrong with how it ended, or None."""
    code, out, err = command(argv)
    written = sorted(p.name for p in folder.iterdir())
    if read:
        if code != 0:
            return f"{name}: read, but the command exited {code}: {err!r}"
        if not out.isprintable() and any(not (c.isprintable() or c == "\n") for c in out):
            return f"{name}: printed unescaped control characters: {out!r}"
    elif code != 2 or not err.startswith("error: ") or err.count("\n") != 1 or written:
        return f"{name}: exit {code}, stderr {err!r}, wrote {written}"
    return None


def test_every_crafted_file_is_read_or_refused_in_one_line(crafted, tmp_path):
    """The reader on every case, then the command with the text summary and with ``--acmi``."""
    outcomes = {name: read_outcome(path) for name, path in crafted.items()}
    assert len(outcomes) >= 250
    problems = []
    for name, path in crafted.items():
        folder = tmp_path / name
        folder.mkdir()
        for extra in ([], ["--acmi", str(folder / "fight.acmi")]):
            problem = check_run(name, [str(path), *extra], folder, outcomes[name] == "read")
            if problem:
                problems.append(problem)
    assert not problems, "\n".join(problems)
    # The findings of the issue are refused (the names below are CASES).
    for name in ("agents-list", "outcome-int", "winner-int", "event-string", "event-no-t", "no-sim-config",
                 "sim-config-string", "positions-inf", "positions-nan", "dt-zero", "time-nan"):
        assert outcomes[name] == "refused", name
    assert outcomes["escape-names"] == outcomes["version-newer-minor"] == "read"


OUTPUT_CASES = ("escape-names",)
"""Files the reader accepts, rendered with every output in the fast tier (all of them: slow)."""


def _every_output(path: Path, folder: Path) -> list[str]:
    pytest.importorskip("matplotlib")
    pytest.importorskip("PIL")
    return [str(path), "--png", str(folder / "a.png"), "--gif", str(folder / "a.gif"), "--size", "64x48",
            "--fps", "4", "--acmi", str(folder / "a.acmi"), "--spacetime", str(folder / "s.png"), "--at", "2"]


@pytest.mark.parametrize("name", OUTPUT_CASES)
def test_accepted_crafted_files_render_with_every_output(crafted, tmp_path, name):
    code, out, err = command(_every_output(crafted[name], tmp_path))
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.acmi", "a.gif", "a.png", "s.png"]
    if name == "escape-names":
        assert "\x1b" not in out and "\x07" not in out
        acmi = (tmp_path / "a.acmi").read_text(encoding="utf-8")
        assert "\x1b" not in acmi and "\\x1b[2J\\x1b[31mred\\x07" in acmi


@pytest.mark.slow
@pytest.mark.parametrize("name", [*CASES, *(f"flip-{k:02d}" for k in range(FLIPS))])
def test_every_accepted_crafted_file_renders_with_every_output(crafted, tmp_path, name):
    """Each file the reader accepts (the file cut short never is), with every output."""
    if read_outcome(crafted[name]) == "refused":
        return
    code, _, err = command(_every_output(crafted[name], tmp_path))
    assert code == 0, err


@pytest.mark.parametrize(("name", "flag"), [
    ("agents-list", "--png"), ("dt-zero", "--gif"),
    pytest.param("positions-inf", "--spacetime", marks=pytest.mark.slow),
    pytest.param("sim-config-string", "--acmi", marks=pytest.mark.slow),
])
def test_findings_as_real_processes(crafted, tmp_path, name, flag):
    """The command run as a process: one line, exit 2, nothing written."""
    p = subprocess.run([sys.executable, "-m", "pipeline.replay", str(crafted[name]), flag, str(tmp_path / "out")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith(f"error: {crafted[name]}: ") and p.stderr.count("\n") == 1, p.stderr
    assert not list(tmp_path.iterdir())


def test_names_from_the_file_are_printed_escaped(crafted):
    p = subprocess.run([sys.executable, "-m", "pipeline.replay", str(crafted["escape-names"])],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "red: \\x1b[2J\\x1b[31mred\\x07  blue: a\\nb\\rc\\x00$\\frac{1}{  " in p.stdout
    assert all(c.isprintable() or c == "\n" for c in p.stdout)


@pytest.mark.parametrize(("flags", "message"), [
    (["--fps", "0"], "--fps must be a number > 0"),
    (["--fps", "-5"], "--fps must be a number > 0"),
    (["--fps", "nan"], "--fps must be a number > 0"),
    (["--fps", "1e9"], "at most 120"),
    (["--speed", "inf"], "--speed must be a number > 0"),
    (["--speed", "0"], "--speed must be a number > 0"),
    (["--size", "4096x4096"], "--size 4096x4096 is too large"),
])
def test_animation_options_out_of_range_are_refused(real_replay, tmp_path, flags, message):
    code, _, err = command([str(real_replay), "--gif", str(tmp_path / "a.gif"), *flags])
    assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())


def _peak_rss_mib(argv: list[str]) -> tuple[int, float, str]:
    """Run ``python -m pipeline.replay ARGV`` as a child; (exit status, its peak resident MiB,
    stderr)."""
    probe = ("import resource, subprocess, sys\n"
             "p = subprocess.run([sys.executable, '-m', 'pipeline.replay', *sys.argv[1:]], capture_output=True, text=True)\n"
             "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.stderr.write(p.stderr)\n")
    p = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True, text=True, timeout=600)
    code, kib = p.stdout.split()
    return int(code), int(kib) / 1024, p.stderr


@pytest.mark.slow
def test_memory_stays_bounded_for_many_empty_blocks_and_a_large_gif(real_replay, tmp_path):
    """44 MB of empty blocks (1.3 GB resident before) and a 4096x2160 GIF (the largest size;
    every picture kept before): a generous ceiling, far under what unbounded growth reaches."""
    objs = split(real_replay.read_bytes())
    empty = join([{"type": "frames", "count": 0, "arrays": {k: b"" for k in objs[1]["arrays"]}, "events": []}])
    big = tmp_path / "empty-blocks.replay"
    big.write_bytes(join(objs[:1]) + empty * (44_000_000 // len(empty)) + join(objs[1:]))
    code, peak, err = _peak_rss_mib([str(big)])
    assert code == 0, err
    assert peak < 700, f"{peak:.0f} MiB resident reading {big.stat().st_size / MIB:.0f} MB of empty blocks"
    pytest.importorskip("PIL")
    code, peak, err = _peak_rss_mib([str(real_replay), "--gif", str(tmp_path / "big.gif"), "--size", "4096x2160"])
    assert code == 0, err
    assert peak < 1500, f"{peak:.0f} MiB resident writing a 4096x2160 GIF"
