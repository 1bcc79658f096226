"""A real full disk for the tests: a command run with a 4 KiB tmpfs mounted on a folder, in a
private mount namespace (``unshare -r -m``), so writing there fails with ENOSPC."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_on_full_disk(tiny: Path, module: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGV`` from the repository root with a 4 KiB tmpfs on ``tiny`` (made
    here); skips the test where no private tmpfs can be mounted."""
    tiny.mkdir()
    script = f"mount -t tmpfs -o size=4k tmpfs {tiny} && exec {sys.executable} -m {module} {' '.join(argv)}"
    p = subprocess.run(["unshare", "-r", "-m", "sh", "-c", script], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    if "mount" in p.stderr or "unshare" in p.stderr:
        pytest.skip(f"no private tmpfs here ({p.stderr.strip()})")
    return p
