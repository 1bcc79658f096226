"""Nothing lost, nothing silently wrong: non-finite values stop a run without a NaN checkpoint,
run directories are owned, failed starts leave nothing, bad input is one line and exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from learner.checkpoint import read_checkpoint
from pipeline.launch import main

REPO = Path(__file__).resolve().parents[1]
T, B = 4, 8
CHUNK = T * B
BASE = ["--actors", "2", "--envs-per-actor", str(B), "--rollout-len", str(T), "--device", "cpu",
        "--opponent", "straight", "--reward", "outcome", "--display", "plain", "--metrics-port", "-1",
        "--set", "run.eval_episodes=0", "--set", "ppo.hidden_sizes=[8]", "--set", "ppo.update_epochs=1",
        "--actor-processes", "off"]


def launch(tmp_path: Path, *extra: str, steps: int = 8 * CHUNK, name: str = "run") -> list[str]:
    return [*BASE, "--total-steps", str(steps), "--run-dir", str(tmp_path / name), *extra]


def all_finite(checkpoint: Path) -> bool:
    state = read_checkpoint(checkpoint)
    return all(bool(torch.isfinite(t).all()) for t in state["model"].values() if t.is_floating_point())


def test_nan_rewards_stop_the_run_before_any_update(tmp_path, capsys):
    code = main(launch(tmp_path, "--reward", "tests.plugins_faulty:NaNReward"))
    out = capsys.readouterr().out
    assert code == 1, out
    assert "non-finite rewards" in out and "the run stops" in out
    s = next(line for line in out.splitlines() if line.startswith("samples:"))
    assert "consumed 0 +" in s  # the chunk with NaN rewards was never trained on
    assert all_finite(tmp_path / "run" / "checkpoints" / "latest.pt")


def test_overflowing_returns_stop_the_run_and_no_nan_checkpoint_is_written(tmp_path, capsys):
    code = main(launch(tmp_path, "--reward", "tests.plugins_faulty:HugeReward",
                       "--set", "run.checkpoint_interval_s=0.001"))
    out = capsys.readouterr().out
    assert code == 1, out
    assert "error: PPO update 1: non-finite" in out
    assert "final checkpoint not written: refusing to save a non-finite checkpoint" in out
    assert "checkpoint: none written" in out  # and nothing non-finite was written before
    assert not list((tmp_path / "run" / "checkpoints").glob("*.pt"))


def test_nan_reward_weight_is_a_config_error(tmp_path, capsys):
    assert main(launch(tmp_path, "--reward", "nan*shaped")) == 2
    assert "reward" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_an_opponent_breaking_its_contract_stops_the_run_at_once(tmp_path, capsys):
    code = main(launch(tmp_path, "--opponent", "tests.plugins_faulty:OneRowOpponent"))
    out = capsys.readouterr().out
    assert code == 1
    assert "returned actions of shape (1, 3), expected (8, 3)" in out
    # Not restarted over and over: the first violation stops the run (both actors may meet it
    # in the same moment, each reported once).
    assert "failure 1/" in out and "failure 3/" not in out
    assert "restarting on fresh environments" not in (tmp_path / "run" / "run.log").read_text()


def test_reusing_a_run_directory_needs_resume(tmp_path, capsys):
    assert main(launch(tmp_path)) == 0
    first = read_checkpoint(tmp_path / "run" / "checkpoints" / "latest.pt")
    config = (tmp_path / "run" / "config.toml").read_text()
    capsys.readouterr()
    assert main(launch(tmp_path, "--seed", "3")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "is not empty" in err and f"--resume {tmp_path / 'run'}" in err and "--run-dir" in err
    assert (tmp_path / "run" / "config.toml").read_text() == config
    # --resume RUN continues it in place, with its own config, to a larger budget.
    assert main(["--resume", str(tmp_path / "run"), "--total-steps", str(12 * CHUNK)]) == 0
    state = read_checkpoint(tmp_path / "run" / "checkpoints" / "latest.pt")
    assert state["extra"]["agent_steps"] == 12 * CHUNK
    assert state["policy_version"] > first["policy_version"]


def test_a_rejected_resume_writes_nothing(tmp_path, capsys):
    assert main(launch(tmp_path)) == 0
    run_dir = tmp_path / "run"
    latest = run_dir / "checkpoints" / "latest.pt"
    latest.unlink()  # it may be a hard link of the newest numbered checkpoint
    latest.write_bytes(b"")  # damaged
    before = {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")}
    assert main(["--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "run.resume" in err and "latest.pt" in err and "Traceback" not in err
    assert {p: p.stat().st_mtime_ns for p in run_dir.rglob("*")} == before


@pytest.mark.slow
def test_a_rejected_resume_stops_the_actor_processes_it_started(tmp_path):
    # The checkpoint is read once the actors exist (actor processes: the CPU default); a bad
    # one is one line and exit 2, and the launcher exits instead of waiting on its children.
    (tmp_path / "garbage.pt").write_bytes(b"garbage\n")
    done = subprocess.run([sys.executable, "-m", "pipeline.launch", "--resume", str(tmp_path / "garbage.pt"),
                           "--run-dir", str(tmp_path / "run"), "--total-steps", "4096", "--actors", "2",
                           "--actor-processes", "on", "--metrics-port", "-1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)  # a hang guard
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [
        f"error: run.resume: checkpoint {tmp_path / 'garbage.pt'} is truncated or corrupt (not a zip archive)"]
    assert not (tmp_path / "run").exists()


def test_a_live_lock_refuses_and_a_dead_one_is_taken_over(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import socket

        (run_dir / ".lock").write_text(json.dumps({"pid": sleeper.pid, "host": socket.gethostname(),
                                                   "started": "then"}))
        assert main(launch(tmp_path)) == 2
        assert f"is in use by pid {sleeper.pid}" in capsys.readouterr().err
    finally:
        sleeper.kill()
        sleeper.wait()
    assert main(launch(tmp_path)) == 0
    out = capsys.readouterr().out
    assert f"took over the lock of pid {sleeper.pid}" in out
    assert not (run_dir / ".lock").exists()


def test_stale_temporary_files_are_swept(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    stale = run_dir / "checkpoints" / f".latest.pt.{dead.pid}.tmp"
    stale.write_bytes(b"half")
    assert main(launch(tmp_path)) == 0
    assert not stale.exists()
    assert "temporary file(s) a killed run left" in capsys.readouterr().out


@pytest.mark.parametrize(("extra", "message"), [
    (["--opponent", "nonsense"], "unknown agent 'nonsense'"),
    (["--opponent", "tests.plugins_faulty:BrokenConstructor"], "raised RuntimeError: cannot build this opponent"),
    (["--envs-per-actor", "100000000"], "this run needs about"),
    (["--seed", "99999999999999999999"], "run.seed must be an integer in [0, 4294967295]"),
    (["--time-scale", "1e9"], "time_scale"),
    (["--metrics-port", "0", "--metrics-addr", "192.0.2.1"],
     "error: run.metrics_addr (--metrics-addr) cannot listen on 192.0.2.1: cannot assign requested address "
     "(give an address of this machine: 127.0.0.1 for it alone, 0.0.0.0 or :: for every interface)"),
])
def test_bad_input_is_one_line_exit_2_and_leaves_no_directory(tmp_path, capsys, extra, message):
    assert main(launch(tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_run_dir_and_config_that_are_not_what_they_should_be(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(launch(tmp_path, name="afile")) == 2
    assert "is a file, not a directory" in capsys.readouterr().err
    assert main([*BASE, "--config", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    binary = tmp_path / "c.toml"
    binary.write_bytes(os.urandom(64) + b"\xff\xfe")
    assert main([*BASE, "--config", str(binary)]) == 2
    assert "is not valid TOML" in capsys.readouterr().err


@pytest.mark.parametrize("addr", ["0.0.0.0", "::"])
def test_metrics_open_to_the_network_are_a_warning(tmp_path, capsys, addr):
    if addr == "::" and not __import__("socket").has_ipv6:
        pytest.skip("no IPv6 here")
    assert main(launch(tmp_path, "--metrics-port", "0", "--metrics-addr", addr, steps=CHUNK)) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: metrics are exposed to the network: --metrics-addr {addr} listens "
                        "beyond this machine (127.0.0.1 keeps them on it)"]


def test_metrics_on_the_loopback_are_no_warning(tmp_path, capsys):
    assert main(launch(tmp_path, "--metrics-port", "0", "--metrics-addr", "127.0.0.1", steps=CHUNK)) == 0
    assert "warning:" not in capsys.readouterr().out


def test_a_folder_that_is_not_a_run_says_what_it_holds(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in ("notes.txt", "data.csv", "photos", "z.bin"):
        (run_dir / name).mkdir() if name == "photos" else (run_dir / name).write_text("mine")
    assert main(launch(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: run directory {run_dir} is not empty and is not a run directory (it holds 4 "
                   "file(s) or folder(s): data.csv, notes.txt, photos, ...); choose a new or empty --run-dir")
    assert sorted(p.name for p in run_dir.iterdir()) == ["data.csv", "notes.txt", "photos", "z.bin"]


@pytest.mark.parametrize(("content", "why"), [
    (b"garbage!", "garbage (not the pid, host and start time a run writes: 'garbage!')"),
    (b"[1]", "garbage (not the pid, host and start time a run writes: '[1]')"),
    (b'{"pid": "12"}', """garbage (not the pid, host and start time a run writes: '{"pid": "12"}')"""),
    (b"\xff\xfe\x00", "unreadable ("),
])
def test_a_garbage_lock_says_why_it_cannot_be_taken(tmp_path, capsys, content, why):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").write_bytes(content)
    assert main(launch(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: run directory {run_dir}: could not take the lock {run_dir / '.lock'}: "
                          f"it is {why}"), err
    assert err.endswith("; remove it if no run is using this directory") and "\n" not in err
    assert (run_dir / ".lock").read_bytes() == content  # left for the user to judge
