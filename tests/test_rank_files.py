"""What a resumed torchrun job sends to a rank whose machine lacks the run
(:mod:`pipeline.run.rank_files`), and the rank-log-only folder rank 0 may take as its run
directory. The job itself, on two simulated machines, is in tests/test_torchrun.py."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from pipeline.config import ConfigError
from pipeline.run.rank_files import COPY_PREFIX, _resume_from, pack_run, unpack_run
from pipeline.run.rundir import claim_run_dir


def _fake_run(root):
    (root / "checkpoints").mkdir(parents=True)
    (root / "league").mkdir()
    (root / "config.toml").write_text("[run]\n")
    for name in ("ckpt_000000004.pt", "ckpt_000000008.pt", "latest.pt"):
        (root / "checkpoints" / name).write_bytes(name.encode())
    for name in ("ckpt_000000002.pt", "ckpt_000000006.pt", "latest.pt", "league.json"):
        (root / "league" / name).write_bytes(name.encode())
    (root / "progress.csv").write_text("a,b\n")
    (root / "run.log").write_text("log\n")


def test_a_run_is_packed_with_what_a_resume_reads_and_nothing_else(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _fake_run(run)
    packed = pack_run(str(run))
    assert sorted(packed["files"]) == ["checkpoints/latest.pt", "config.toml", "league/ckpt_000000002.pt",
                                       "league/ckpt_000000006.pt", "league/league.json"]
    assert packed["resume_rel"] == ""
    # A checkpoint of the run named: that one, and the newest (the league's limits).
    packed = pack_run(str(run / "checkpoints" / "ckpt_000000004.pt"))
    assert "checkpoints/ckpt_000000004.pt" in packed["files"] and "checkpoints/latest.pt" in packed["files"]
    assert packed["resume_rel"] == "checkpoints/ckpt_000000004.pt"
    # A bare checkpoint elsewhere; nothing at all.
    (tmp_path / "bare.pt").write_bytes(b"x")
    assert pack_run(str(tmp_path / "bare.pt")) == {"files": {"bare.pt": b"x"}, "resume_rel": "bare.pt"}
    assert pack_run(str(tmp_path / "nothing")) == {"files": {}, "resume_rel": ""}

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    copy = unpack_run(packed := pack_run(str(run)))
    assert copy.root.name.startswith(COPY_PREFIX) and copy.resume_from == copy.root
    for rel, data in packed["files"].items():
        assert (copy.root / rel).read_bytes() == data
    copy.remove()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_packed_path_that_leaves_the_copy_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(ConfigError, match="outside the run"):
        unpack_run({"files": {"../escaped": b"x"}, "resume_rel": ""})
    assert list(tmp_path.iterdir()) == []


def test_resume_is_pointed_at_the_copy():
    tmp = Path("/copy")
    assert _resume_from(["--resume", "run", "--total-steps", "9"], tmp, has_resume=True) == [
        "--total-steps", "9", "--resume", str(tmp)]
    assert _resume_from(["--resume=run"], tmp, has_resume=True) == ["--resume", str(tmp)]
    assert _resume_from(["--run-dir", "run"], tmp, has_resume=False) == ["--run-dir", "run", "--resume", str(tmp)]


def test_a_folder_holding_only_other_ranks_logs_can_be_a_new_run(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.rank1.log").write_text("an earlier job's rank 1\n")
    claimed = claim_run_dir(folder, "[run]\n", resuming_here=False)
    try:
        assert (folder / "config.toml").is_file() and (folder / "run.rank1.log").is_file()
    finally:
        claimed.release(keep=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "run.rank1.log.bak").write_text("x")
    with pytest.raises(ConfigError, match="not a run directory"):
        claim_run_dir(other, "[run]\n", resuming_here=False)
