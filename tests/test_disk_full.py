"""A full disk, made real: a tiny tmpfs mounted in a user and mount namespace of its own
(``unshare -r -m``), or a link to ``/dev/full`` where a file's name is known in advance. Every
failure is one line naming the path and ``no space left on device``, and nothing half-written
stays behind."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tmpfs_works() -> str:
    """Empty when a small tmpfs can be mounted in a namespace of its own, else why not."""
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    probe = subprocess.run(["unshare", "-r", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a user namespace here: {probe.stderr.strip()}"
    return ""


TMPFS = _tmpfs_works() if sys.platform == "linux" else "needs Linux namespaces"
needs_tmpfs = pytest.mark.skipif(bool(TMPFS), reason=TMPFS)


FILES_MARK = "--- files on the tmpfs:"


def on_full_tmpfs(folder: Path, size: str, command: list[str]) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``command`` (from the repository root) with a ``size`` tmpfs mounted on ``folder``;
    the result (its stdout without the listing) and the files the tmpfs held at the end,
    listed from inside the namespace, before the tmpfs goes away with it."""
    folder.mkdir(parents=True, exist_ok=True)
    where = shlex.quote(str(folder))
    script = (f"mount -t tmpfs -o size={size} tmpfs {where} || exit 99; "
              + " ".join(shlex.quote(c) for c in command)
              + f"; rc=$?; echo; echo {shlex.quote(FILES_MARK)}; find {where} -type f; exit $rc")
    result = subprocess.run(["unshare", "-r", "-m", "sh", "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode != 99, result.stderr
    out, _, listing = result.stdout.rpartition(FILES_MARK)
    result.stdout = out
    return result, sorted(listing.split())


@pytest.mark.slow
@needs_tmpfs
def test_evaluate_record_on_a_full_disk_names_the_replay_and_leaves_no_temporary_file(tmp_path):
    mount = tmp_path / "disk"
    result, files = on_full_tmpfs(mount, "64k", [
        sys.executable, "-m", "pipeline.evaluate", "--agent", "pursuit", "--opponents", "straight",
        "--episodes", "2", "--record", str(mount / "rec")])
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: cannot write {mount}/rec/pursuit-vs-straight-000.replay: no space left on device"]
    assert files == []  # neither a replay nor its temporary file
