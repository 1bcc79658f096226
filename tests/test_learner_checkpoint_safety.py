"""Checkpoints never lie and never lose: every kind of damage is one clear error, a non-finite
learner is not saved, a full disk keeps the last good checkpoint, stale temporary files of a
killed writer are swept, and pruning spares other runs' checkpoints."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ckpt_damage import DAMAGE, fill, tiny_filesystem
from test_learner_ppo import random_batch, small_learner

from core.files import temporary_path
from learner.checkpoint import (
    CheckpointError,
    NonFiniteStateError,
    atomic_torch_save,
    list_checkpoints,
    load_checkpoint,
    load_policy,
    read_checkpoint,
    resolve_checkpoint_path,
    save_checkpoint,
    sweep_stale_tmp,
)


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _tmp_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> Path:
    learner = small_learner()
    learner.update(random_batch(learner))
    return save_checkpoint(tmp_path_factory.mktemp("good"), learner)


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_each_kind_of_damage_is_one_line_naming_the_file(kind, good_checkpoint, tmp_path):
    damage, message = DAMAGE[kind]
    bad = damage(good_checkpoint, tmp_path)
    for load in (read_checkpoint, load_policy, lambda p: load_checkpoint(p, small_learner())):
        with pytest.raises(CheckpointError) as caught:
            load(bad)
        text = str(caught.value)
        assert re.fullmatch(message, text), text
        assert str(bad) in text and "\n" not in text
        assert isinstance(caught.value, ValueError)  # command lines report ValueError as bad input


def test_resolver_takes_a_file_a_checkpoints_folder_or_a_run_directory(good_checkpoint, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(good_checkpoint.parent, run / "checkpoints")
    latest = run / "checkpoints" / "latest.pt"
    assert resolve_checkpoint_path(run) == latest
    assert resolve_checkpoint_path(run / "checkpoints") == latest
    assert resolve_checkpoint_path(str(latest)) == latest
    assert read_checkpoint(run)["policy_version"] == 1
    (run / "checkpoints" / "latest.pt").unlink()
    with pytest.raises(CheckpointError, match=r"^no checkpoint in \S+run \(looked for \S+run/latest\.pt and "
                                              r"\S+run/checkpoints/latest\.pt\); it holds "
                                              r"\S+ckpt_000000001\.pt, which can be named instead$"):
        resolve_checkpoint_path(run)
    with pytest.raises(CheckpointError, match=r"^no checkpoint at \S+nowhere \(no such file or directory\)$"):
        resolve_checkpoint_path(tmp_path / "nowhere")


@pytest.mark.parametrize(("where", "kind"), [("parameter", "NaN"), ("buffer", "inf"), ("optimizer", "NaN")])
def test_a_non_finite_learner_is_not_saved_and_nothing_changes(where, kind, tmp_path):
    learner = small_learner()
    learner.update(random_batch(learner))
    save_checkpoint(tmp_path, learner)
    learner.update(random_batch(learner, seed=1))
    before = _snapshot(tmp_path)
    name, param = next(iter(learner.policy.named_parameters()))
    bad = float("nan") if kind == "NaN" else float("inf")
    with torch.no_grad():
        if where == "parameter":
            param[0, 0] = bad
            expected = f"model parameter {name} has NaN"
        elif where == "buffer":
            learner.policy.obs_norm.var[3] = bad
            expected = "model buffer obs_norm.var has inf"
        else:
            learner.optimizer.state[param]["exp_avg_sq"][0, 1] = bad
            expected = f"optimizer state exp_avg_sq of {name} has NaN"
    with pytest.raises(NonFiniteStateError) as caught:
        save_checkpoint(tmp_path, learner)
    assert str(caught.value) == f"refusing to save a non-finite checkpoint: {expected}"
    assert isinstance(caught.value, CheckpointError) and isinstance(caught.value, ValueError)
    assert _snapshot(tmp_path) == before  # nothing written, nothing pruned, latest.pt as it was
    assert load_policy(tmp_path).policy_version == 1


def test_huge_but_finite_weights_are_saved(tmp_path):
    # The fused check's norms overflow to inf here; the search behind it must then find nothing.
    learner = small_learner()
    with torch.no_grad():
        next(iter(learner.policy.parameters())).fill_(3e38)
    save_checkpoint(tmp_path, learner)
    assert float(next(iter(load_policy(tmp_path).parameters())).detach()[0, 0]) == pytest.approx(3e38)


def test_a_full_disk_keeps_the_last_good_checkpoint(tmp_path):
    learner = small_learner()
    with tiny_filesystem(tmp_path / "fs") as fs:
        ckpts = fs / "checkpoints"
        learner.update(random_batch(learner))
        save_checkpoint(ckpts, learner)
        filler = fill(fs, leave=8 * 1024)
        learner.update(random_batch(learner, seed=1))
        with pytest.raises(CheckpointError) as caught:
            save_checkpoint(ckpts, learner)
        assert str(caught.value) == (f"no space left on device while writing {ckpts}/ckpt_000000002.pt "
                                     f"(the last good checkpoint is {ckpts}/latest.pt)")
        assert sorted(p.name for p in ckpts.iterdir()) == ["ckpt_000000001.pt", "latest.pt"]
        assert read_checkpoint(ckpts)["policy_version"] == 1
        # Once there is room again the same learner saves, and latest.pt follows.
        filler.unlink()
        save_checkpoint(ckpts, learner)
        assert read_checkpoint(ckpts)["policy_version"] == 2 and not _tmp_files(ckpts)


def test_atomic_writes_on_a_full_or_read_only_disk_leave_no_temporary_file(tmp_path):
    payload = {"x": torch.zeros(64 * 1024)}  # 256 KiB: more than the filesystem holds
    with tiny_filesystem(tmp_path / "fs") as fs:
        with pytest.raises(CheckpointError, match=r"^no space left on device while writing \S+/first\.pt "
                                                  r"\(no earlier checkpoint exists\)$"):
            atomic_torch_save(payload, fs / "first.pt")
        atomic_torch_save({"x": torch.ones(4)}, fs / "small.pt")
        with pytest.raises(CheckpointError, match=r"^no space left on device while writing \S+/small\.pt "
                                                  r"\(the last good checkpoint is \S+/small\.pt\)$"):
            atomic_torch_save(payload, fs / "small.pt")
        assert sorted(p.name for p in fs.iterdir()) == ["small.pt"]
        assert torch.equal(torch.load(fs / "small.pt", weights_only=True)["x"], torch.ones(4))
        subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
        with pytest.raises(CheckpointError, match=r"^read-only file system while writing \S+/small\.pt"):
            atomic_torch_save({"x": torch.ones(4)}, fs / "small.pt")


def test_sweep_removes_only_the_temporary_files_of_dead_writers(tmp_path):
    # A real writer: a process that opens its temporary file, then is killed with SIGKILL.
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from core.files import temporary_path; "
         "p = temporary_path(sys.argv[1]); p.write_bytes(b'half'); print(p, flush=True); time.sleep(600)",
         str(tmp_path / "latest.pt")],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        theirs = Path(child.stdout.readline().strip())
        assert theirs.name == f".latest.pt.{child.pid}.tmp" and theirs.is_file()
        ours = temporary_path(tmp_path / "ckpt_000000003.pt")
        ours.write_bytes(b"being written")
        keep = [tmp_path / "latest.pt", tmp_path / ".lock", tmp_path / ".notes.tmp", tmp_path / ".x.0.tmp"]
        for p in keep:
            p.write_bytes(b"")
        assert sweep_stale_tmp(tmp_path) == []  # the writer still runs
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert sweep_stale_tmp(tmp_path) == [theirs]
        assert not theirs.exists() and ours.is_file() and all(p.exists() for p in keep)
        assert sweep_stale_tmp(tmp_path / "missing") == []
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()


def test_pruning_spares_higher_versions_of_an_earlier_run(good_checkpoint, tmp_path):
    for version in (100, 101, 102):  # an earlier run's checkpoints, in the same folder
        shutil.copy(good_checkpoint, tmp_path / f"ckpt_{version:09d}.pt")
    learner = small_learner()
    for i in range(4):
        learner.update(random_batch(learner, seed=i))
        path = save_checkpoint(tmp_path, learner, keep_last=2)
        assert path.is_file()  # the checkpoint just written survives its own pruning
        assert read_checkpoint(tmp_path)["policy_version"] == i + 1
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt_000000003.pt", "ckpt_000000004.pt", "ckpt_000000100.pt", "ckpt_000000101.pt", "ckpt_000000102.pt"]


@pytest.mark.parametrize("saved_before", [0, 1])
def test_a_writer_killed_between_a_checkpoints_two_names_leaves_one_that_resumes(tmp_path, saved_before):
    """A checkpoint has two names (``ckpt_N.pt`` and ``latest.pt``, the second a hard link):
    a writer killed between them leaves a folder whose ``latest.pt`` loads, the first
    checkpoint of a run included (a lone ``ckpt_N.pt`` would stop ``--resume`` cold)."""
    tests = Path(__file__).resolve().parent
    script = (
        "import os, sys\n"
        f"sys.path[:0] = [{str(tests)!r}, {str(tests.parent)!r}]\n"
        "from test_learner_ppo import random_batch, small_learner\n"
        "from learner.checkpoint import save_checkpoint\n"
        "learner = small_learner()\n"
        f"for seed in range({saved_before} + 1):\n"
        "    learner.update(random_batch(learner, seed=seed))\n"
        f"    if seed == {saved_before}:\n"
        "        os.link = lambda *args, **kwargs: os._exit(9)  # killed as the second name is made\n"
        f"    save_checkpoint({str(tmp_path)!r}, learner)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 9, done.stderr
    state = read_checkpoint(resolve_checkpoint_path(tmp_path))
    # The new checkpoint when latest.pt was its first name, else the one before it.
    assert state["policy_version"] == max(saved_before, 1)
