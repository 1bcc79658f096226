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


T, B = 4, 8
RUN = ["--actors", "2", "--envs-per-actor", str(B), "--rollout-len", str(T), "--device", "cpu",
       "--opponent", "straight", "--reward", "outcome", "--display", "plain", "--metrics-port", "-1",
       "--set", "run.eval_episodes=0", "--set", "ppo.hidden_sizes=[8]", "--set", "ppo.update_epochs=1",
       "--actor-processes", "off"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("output", ["progress.csv", "run.log"])
def test_a_run_output_on_a_full_disk_stops_the_run_with_its_checkpoint_and_summary(tmp_path, capsys, output):
    from learner.checkpoint import read_checkpoint
    from pipeline.launch import main

    run_dir = tmp_path / "run"
    assert main([*RUN, "--total-steps", str(8 * T * B), "--run-dir", str(run_dir)]) == 0
    (run_dir / output).unlink()
    (run_dir / output).symlink_to("/dev/full")  # every write to it fails with ENOSPC
    capsys.readouterr()
    code = main([*RUN, "--total-steps", "10000000", "--run-dir", str(run_dir), "--resume", str(run_dir),
                 "--set", "run.log_interval_s=0.2"])
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert code == 1, captured.out
    assert captured.err == ""  # no traceback
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == [f"error: no space left on device: {run_dir / output}"]
    assert any(line.startswith("stopped in ") for line in lines)
    assert any(line.startswith("samples: produced ") for line in lines)
    saved = next(line for line in lines if line.startswith("checkpoint: "))
    assert saved != "checkpoint: none written"
    final = read_checkpoint(run_dir / "checkpoints" / "latest.pt")
    assert final["extra"]["agent_steps"] >= 8 * T * B  # the resumed part, if any, kept too


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_tensorboard_events_on_a_full_disk_are_an_oserror_naming_the_event_file(tmp_path):
    pytest.importorskip("tensorboard")
    from pipeline.run.progress_log import ProgressLog

    log = ProgressLog(tmp_path, tensorboard=True)
    assert log._tb is not None
    events = log._tb.path
    events.unlink()
    events.symlink_to("/dev/full")
    with pytest.raises(OSError) as info:
        log.append([{"agent_steps": 10, "wall_s": 1.0, "opponent": "straight", "win_rate": 0.5}])
    assert info.value.filename == str(events)
    assert "no space left on device" in (info.value.strerror or "").lower()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_disk_is_one_line_whichever_file_it_refused_first(tmp_path):
    # The run log's write fails after the run already stopped on a full disk (the profile's
    # trace, say, then the summary's line): no second line. Another cause, or nothing said
    # yet, and the log's failure is the line.
    from pipeline.run.outputs import RUN_LOG, make_logger, unsaid_log_failure
    from pipeline.run.summary import one_line

    (tmp_path / RUN_LOG).symlink_to("/dev/full")
    log = make_logger(tmp_path)
    assert unsaid_log_failure(log, None, "") is None  # nothing written yet, nothing failed
    log.info("the summary")
    trace_full = f"no space left on device: {tmp_path}/trace.json"
    assert unsaid_log_failure(log, None, trace_full) is None
    failure = unsaid_log_failure(log, None, "")
    assert failure is not None and one_line(failure) == f"no space left on device: {tmp_path / RUN_LOG}"
    assert unsaid_log_failure(log, None, "RunFailed: the learner raised ValueError") is failure
    assert unsaid_log_failure(log, OSError(5, "Input/output error", "progress.csv"), "") is None


@needs_tmpfs
def test_a_progress_row_that_does_not_fit_is_cut_back_off(tmp_path):
    # The tmpfs is filled up; the report's rows need more than the page progress.csv already
    # has: the write goes in part, fails, and the file keeps its earlier rows and nothing more.
    mount = tmp_path / "disk"
    script = (
        "import os\n"
        "from pathlib import Path\n"
        "from pipeline.run.progress_log import ProgressLog, read_progress\n"
        f"folder = Path({str(mount)!r})\n"
        "log = ProgressLog(folder)\n"
        "log.append([{'agent_steps': 1, 'wall_s': 0.5, 'opponent': 'straight'}])\n"
        "before = (folder / 'progress.csv').read_bytes()\n"
        "with open(folder / 'filler', 'wb', buffering=0) as f:\n"
        "    try:\n"
        "        while True:\n"
        "            f.write(b'x' * 1024)\n"
        "    except OSError:\n"
        "        pass\n"
        "try:\n"
        "    log.append([{'agent_steps': 2, 'wall_s': 1.0, 'opponent': f'o{k}'} for k in range(200)])\n"
        "except OSError as exc:\n"
        "    print('raised', exc.filename, exc.strerror)\n"
        "print('kept' if (folder / 'progress.csv').read_bytes() == before else 'changed')\n"
        "print(len(read_progress(folder / 'progress.csv')))\n"
    )
    result, _ = on_full_tmpfs(mount, "64k", [sys.executable, "-c", script])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == [
        f"raised {mount}/progress.csv No space left on device", "kept", "1"]


@pytest.mark.slow
@needs_tmpfs
def test_a_final_checkpoint_on_a_full_disk_is_one_message_and_the_summary_follows(tmp_path):
    run_dir = tmp_path / "run"
    result, files = on_full_tmpfs(run_dir / "checkpoints", "8k", [
        sys.executable, "-m", "pipeline.launch", *RUN, "--total-steps", str(8 * T * B),
        "--run-dir", str(run_dir)])
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert (f"final checkpoint not written: no space left on device while writing "
            f"{run_dir}/checkpoints/ckpt_000000004.pt (no earlier checkpoint exists)") in lines
    assert "checkpoint: none written" in lines
    assert any(line.startswith("samples: produced ") for line in lines)
    assert files == []  # no temporary file left on the full disk


@pytest.mark.slow
@needs_tmpfs
def test_a_profile_trace_on_a_full_disk_stops_the_run_with_one_line_and_no_partial_file(tmp_path):
    run_dir = tmp_path / "run"
    result, files = on_full_tmpfs(run_dir, "128k", [
        sys.executable, "-m", "pipeline.launch", *RUN, "--total-steps", str(32 * T * B), "--profile", "3",
        "--run-dir", str(run_dir)])
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("error:")] == [
        f"error: no space left on device: {run_dir}/trace.json"]
    assert any(line.startswith("samples: produced ") for line in lines)
    assert any(line.startswith("final checkpoint not written: ") or line.startswith("checkpoint: ")
               for line in lines)
    assert not [f for f in files if f.endswith(".tmp") or Path(f).name.startswith((".trace", "trace"))], files
