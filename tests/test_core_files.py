"""core.files: a target is either the old file or the whole new one, and a failure leaves no
temporary file behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.files import (
    AtomicFile,
    atomic_path,
    atomic_write,
    temporary_path,
    write_json_atomic,
    write_text_atomic,
    writer_pid,
)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_whole_write_replaces_the_target(tmp_path: Path):
    target = tmp_path / "a.json"
    target.write_text("old")
    write_json_atomic(target, {"x": 1})
    assert json.loads(target.read_text()) == {"x": 1}
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert _leftovers(tmp_path) == []


def test_an_exception_inside_the_block_keeps_the_old_file(tmp_path: Path):
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="half way"), atomic_write(target) as f:
        f.write(b"partial")
        assert temporary_path(target).exists()
        raise RuntimeError("half way")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_a_failed_write_names_the_target_not_the_temporary_file(tmp_path: Path):
    missing = tmp_path / "no-such-folder" / "a.json"
    with pytest.raises(OSError) as info:
        write_json_atomic(missing, {})
    assert info.value.filename == str(missing)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_an_oserror_naming_the_target(tmp_path: Path):
    # /dev/full fails every write with ENOSPC: stands in for the full disk at flush time.
    target = tmp_path / "a.txt"
    target.write_text("old")
    out = AtomicFile(target, "w")
    out.file.close()  # type: ignore[union-attr]
    out.file = open("/dev/full", "w")
    out.handle.write("x" * 10)  # buffered: the flush in commit() meets the full disk
    with pytest.raises(OSError) as info:
        out.commit()
    assert info.value.filename == str(target)
    assert target.read_text() == "old"
    assert _leftovers(tmp_path) == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("mode", ["wb", "w"])
def test_a_streaming_writer_on_a_full_disk_gets_the_target_named_and_no_temporary_file(tmp_path: Path, mode):
    # The temporary name is a link to /dev/full, so the writer's own writes meet ENOSPC, as a
    # replay streamed frame by frame does on a full disk; nobody calls abort() afterwards.
    target = tmp_path / "a.replay"
    temporary_path(target).symlink_to("/dev/full")
    out = AtomicFile(target, mode)
    chunk = b"x" * 100_000 if mode == "wb" else "x" * 100_000
    with pytest.raises(OSError) as info:
        for _ in range(10):
            out.handle.write(chunk)  # type: ignore[arg-type]
    assert info.value.filename == str(target)
    assert "no space left on device" in (info.value.strerror or "").lower()
    assert _leftovers(tmp_path) == []  # removed by the failed write itself
    with pytest.raises(OSError) as again:
        out.commit()
    assert again.value.filename == str(target)
    assert not target.exists() and _leftovers(tmp_path) == []


def test_a_streamed_file_appears_only_on_commit_and_abort_removes_it(tmp_path: Path):
    target = tmp_path / "r.bin"
    out = AtomicFile(target)
    out.handle.write(b"frame")
    assert not target.exists()
    out.commit()
    assert target.read_bytes() == b"frame"
    with pytest.raises(ValueError, match="already closed"):
        out.handle.write(b"more")
    gone = AtomicFile(tmp_path / "s.bin")
    gone.handle.write(b"frame")
    gone.abort()
    gone.abort()
    assert not (tmp_path / "s.bin").exists()
    assert _leftovers(tmp_path) == []


def test_text_is_utf8_with_newline_line_ends(tmp_path: Path):
    target = tmp_path / "a.txt"
    write_text_atomic(target, "ü\nend\n")
    assert target.read_bytes() == "ü\nend\n".encode()


def test_a_named_temporary_file_is_moved_into_place_or_removed(tmp_path: Path):
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="encoder died"), atomic_path(target) as tmp:
        tmp.write_bytes(b"partial")
        raise RuntimeError("encoder died")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []
    with atomic_path(target) as tmp:
        assert tmp == temporary_path(target)
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new"
    assert _leftovers(tmp_path) == []


def test_a_named_writer_that_wrote_nothing_is_an_oserror_naming_the_target(tmp_path: Path):
    target = tmp_path / "a.bin"
    with pytest.raises(OSError) as info, atomic_path(target):
        pass
    assert info.value.filename == str(target)
    assert not target.exists()


def test_writer_pid_reads_the_pid_of_a_temporary_name(tmp_path: Path):
    assert writer_pid(temporary_path(tmp_path / "ckpt_000000001.pt")) == os.getpid()
    assert writer_pid(tmp_path / "ckpt_000000001.pt") is None
    assert writer_pid(tmp_path / ".x.tmp") is None
