"""The league-state checks as real processes: ``python -m pipeline.launch --resume`` of a damaged
league refused in one line (exit 2), a resume without ``league.json``, a run whose
``league.json`` cannot be written, and a snapshot on a full disk (a real tmpfs) left out of a
run that goes on. Each damages a copy of a real run (``league_damage``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from ckpt_damage import tiny_filesystem
from league_damage import (
    REFUSED,
    B,
    T,
    copy_of_real_run,
    damage,
    launch,
    resume_argv,
    state_path,
    tree,
)


@pytest.fixture
def run_copy(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Path:
    """A copy of the real run, to damage."""
    return copy_of_real_run(tmp_path_factory, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("case", REFUSED)
def test_a_resume_process_refuses_a_damaged_league_in_one_line(run_copy, case):
    named = damage(run_copy, case)
    before = tree(run_copy)
    done = launch(*resume_argv(run_copy))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(named), done.stderr
    assert tree(run_copy) == before


@pytest.mark.slow
def test_a_run_whose_league_state_cannot_be_written_names_its_checkpoint(run_copy, tmp_path):
    """A run started in a directory where ``league.json`` is a directory (a ``--resume`` of a
    run with no checkpoint yet, so no league is read): exit 1, and the summary names the
    checkpoint it wrote."""
    run_dir = tmp_path / "fresh"
    (run_dir / "checkpoints").mkdir(parents=True)
    state_path(run_dir).mkdir(parents=True)
    config = (run_copy / "config.toml").read_text().replace(str(run_copy), str(run_dir))
    (run_dir / "config.toml").write_text(config)
    done = launch("--resume", str(run_dir), "--total-steps", str(4 * T * B), "--display", "plain",
                  "--metrics-port", "-1")
    assert done.returncode == 1, done.stdout + done.stderr
    written = sorted((run_dir / "checkpoints").glob("ckpt_*.pt"))[-1]
    assert (f"final checkpoint {written} written, but its league state {state_path(run_dir)} not "
            "written: is a directory") in done.stdout.splitlines(), done.stdout
    assert f"checkpoint: {written}" in done.stdout.splitlines()
    assert "no checkpoint was written" not in done.stdout


@pytest.mark.slow
def test_a_resume_without_league_state_says_the_records_restart(run_copy):
    snapshots = json.loads(state_path(run_copy).read_text())["snapshots"]
    state_path(run_copy).unlink()
    done = launch("--resume", str(run_copy), "--total-steps", str(16 * T * B), "--display", "plain",
                  "--metrics-port", "-1")
    assert done.returncode == 0, done.stderr
    assert (f"league: {state_path(run_copy)} is missing: the league's records start again from zero; "
            f"its {len(snapshots)} snapshot(s) stay in the pool") in done.stdout.splitlines()
    assert state_path(run_copy).is_file()  # written again with the run's next checkpoint


@pytest.mark.slow
def test_a_snapshot_on_a_full_disk_is_left_out_and_the_run_goes_on(run_copy, tmp_path):
    """RUN/league on a 40 KiB tmpfs: league.json (about 10 KiB) fits, a snapshot (about 80 KiB)
    does not; the run says so, goes on, and writes its own checkpoints."""
    league = run_copy / "league"
    state = state_path(run_copy).read_bytes()
    newest = max(int(p.stem.split("_")[1]) for p in (run_copy / "checkpoints").glob("ckpt_*.pt"))
    with tiny_filesystem(league, "40k"):
        state_path(run_copy).write_bytes(state)
        done = launch("--resume", str(run_copy), "--total-steps", str(16 * T * B), "--display", "plain",
                      "--metrics-port", "-1")
        left = sorted(p.name for p in league.iterdir())
        snapshots = json.loads(state_path(run_copy).read_text())["snapshots"]
    assert done.returncode == 0, done.stdout + done.stderr
    pattern = (rf"league: snapshot v(\d+) not written \(no space left on device while writing "
               rf"{re.escape(str(league))}/ckpt_0*\1\.pt\); the run goes on without it, 0 snapshot\(s\) in the pool")
    assert [line for line in done.stdout.splitlines() if re.fullmatch(pattern, line)], done.stdout
    assert "the last good checkpoint" not in done.stdout
    assert left == ["league.json"] and snapshots == []  # no snapshot, no temporary file
    final = torch.load(run_copy / "checkpoints" / "latest.pt", weights_only=True)["policy_version"]
    assert final > newest  # the run went on to its end
    assert f"checkpoint: {run_copy}/checkpoints/ckpt_{final:09d}.pt" in done.stdout.splitlines()
