"""Shared by the checkpoint, plugin and evaluation tests: every kind of damaged checkpoint a user
can hand over, with the one-line message each must produce, and a real, tiny filesystem to
fill up (a tmpfs mount; skipped, with the reason, where mounting is not permitted)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch


class Foreign:
    """A class pickled into a torch file: weights-only loading must refuse it."""


def _empty(good: Path, out: Path) -> Path:
    (p := out / "empty.pt").write_bytes(b"")
    return p


def _truncated(good: Path, out: Path) -> Path:
    data = good.read_bytes()
    (p := out / "truncated.pt").write_bytes(data[: len(data) // 2])
    return p


def _random(good: Path, out: Path) -> Path:
    (p := out / "random.pt").write_bytes(random.Random(0).randbytes(4096))
    return p


def _bit_flip(good: Path, out: Path) -> Path:
    # Flip a byte inside the first tensor's data: torch.load alone would load it silently.
    data = bytearray(good.read_bytes())
    with zipfile.ZipFile(good) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    # The local header's name and extra (torch's alignment padding) lengths say where data starts.
    start = info.header_offset + 30 + int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little")
    start += int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    offset = start + info.file_size // 2
    data[offset] ^= 0xFF
    (p := out / "bitflip.pt").write_bytes(bytes(data))
    return p


def _foreign_dict(good: Path, out: Path) -> Path:
    torch.save({"weights": torch.ones(3)}, p := out / "foreign.pt")
    return p


def _tensor(good: Path, out: Path) -> Path:
    torch.save(torch.ones(3), p := out / "tensor.pt")
    return p


def _pickled_object(good: Path, out: Path) -> Path:
    torch.save({"format_version": 1, "model": Foreign()}, p := out / "pickled.pt")
    return p


def _future_format(good: Path, out: Path) -> Path:
    state = torch.load(good, weights_only=True)
    state["format_version"] = 99
    torch.save(state, p := out / "future.pt")
    return p


def _plain_zip(good: Path, out: Path) -> Path:
    with zipfile.ZipFile(p := out / "plain.pt", "w") as z:
        z.writestr("notes.txt", "hello")
    return p


def _folder_without_latest(good: Path, out: Path) -> Path:
    (p := out / "no_latest").mkdir()
    return p


DAMAGE: dict[str, tuple[Callable[[Path, Path], Path], str]] = {
    "empty": (_empty, r"checkpoint \S*empty\.pt is empty \(0 bytes\)"),
    "truncated": (_truncated, r"checkpoint \S*truncated\.pt is truncated or corrupt "
                              r"\(a zip archive cut short at \d+ bytes\)"),
    "random bytes": (_random, r"checkpoint \S*random\.pt is truncated or corrupt \(not a zip archive\)"),
    "flipped bits": (_bit_flip, r"checkpoint \S*bitflip\.pt is corrupt \(CRC mismatch in \S+/data/\d+\)"),
    "foreign torch dict": (_foreign_dict, r"\S*foreign\.pt is not a midrange-rl checkpoint \(format: a dict "
                                          r"without format_version; keys: weights\)"),
    "torch tensor": (_tensor, r"\S*tensor\.pt is not a midrange-rl checkpoint \(format: a torch file "
                              r"holding a Tensor, not a dict\)"),
    "pickled object": (_pickled_object, r"\S*pickled\.pt is not a midrange-rl checkpoint \(format: it "
                                        r"holds Python objects \(ckpt_damage\.Foreign\), which are not loaded\)"),
    "future format": (_future_format, r"\S*future\.pt is not a midrange-rl checkpoint of this version "
                                      r"\(format 99; this code reads format 1\)"),
    "plain zip": (_plain_zip, r"\S*plain\.pt is not a midrange-rl checkpoint \(format: a zip archive, "
                              r"but no torch file\)"),
    "folder without latest.pt": (_folder_without_latest, r"no checkpoint in \S*no_latest \(looked for "
                                                         r"\S*no_latest/latest\.pt and "
                                                         r"\S*no_latest/checkpoints/latest\.pt\)"),
}
"""Kind of damage → (make it from a good checkpoint into a folder, the message it must give)."""


@contextlib.contextmanager
def tiny_filesystem(where: Path, size: str = "256k") -> Iterator[Path]:
    """A real tmpfs of ``size`` mounted at ``where`` (unmounted afterwards); skips the test with
    the reason when this process may not mount one."""
    where.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to fill up needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def fill(directory: Path, leave: int) -> Path:
    """Fill the filesystem of ``directory`` until about ``leave`` bytes are free."""
    filler = directory / "filler"
    free = shutil.disk_usage(directory).free
    with open(filler, "wb") as f:
        f.write(b"\0" * max(free - leave, 0))
    return filler
