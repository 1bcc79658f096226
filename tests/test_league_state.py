"""A resumed league's state, damaged: ``RUN/league/league.json`` and the snapshots beside it are
checked before anything is trained (one line naming the file, exit 2), a deleted
``league.json`` restarts the records with a message, and the run's checkpoint is named as
written when its ``league.json`` cannot be. Each case damages a copy of a real run
(``league_damage``); the same as real processes, and a snapshot on a full disk:
``test_league_state_runs.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from league_damage import (
    DAMAGE,
    RAW,
    REFUSED,
    B,
    T,
    copy_of_real_run,
    damage,
    edit_state,
    foreign_snapshot,
    league_argv,
    resume_argv,
    state_path,
    tree,
)

from learner.checkpoint import load_policy, read_checkpoint, resolve_checkpoint_path
from monitoring import Metrics
from pipeline.config import ConfigError, PipelineConfig, resolve
from pipeline.config.flags import parse_config
from pipeline.launch import main
from pipeline.league.matchmaking import League
from pipeline.league.pool import LeagueStateNotWritten
from pipeline.league.resuming import resume_league
from sim import SimConfig


def resume_config(run_dir: Path, *settings: str) -> PipelineConfig:
    flags = ["--resume", str(run_dir), "--display", "none", "--metrics-port", "-1"]
    for kv in settings:
        flags += ["--set", kv]
    return resolve(parse_config(flags), "cpu")


def load_league(run_dir: Path, *settings: str) -> tuple[League, list[str]]:
    """The league a ``--resume`` of ``run_dir`` takes up, through the launcher's own function,
    for a learner at the version of the run's newest checkpoint."""
    config = resume_config(run_dir, *settings)
    league = League(config.league, run_dir / "league", config.run.seed, lambda: load_policy(run_dir))
    version = int(read_checkpoint(resolve_checkpoint_path(run_dir / "checkpoints"))["policy_version"])
    notes = resume_league(league, run_dir, config, version)
    return league, notes


@pytest.mark.parametrize(("self_play_from", "selves"), [(0.4, True), (0.6, False)])
def test_a_resumed_league_knows_the_runs_progress_before_its_first_update(run_copy, self_play_from, selves):
    """The real run made 4 updates; resumed to twice its agent-steps (8 updates), its league
    draws past selves at once when ``self_play_from`` is below one half and none when above,
    before any update."""
    league, _ = load_league(run_copy, f"run.total_steps={16 * T * B}", "league.self_play=1.0",
                            f"league.self_play_from={self_play_from}")
    assert league.progress == pytest.approx(0.5)
    assert league.snapshots
    drawn = {league.draw() for _ in range(200)}
    assert bool(drawn & set(league.snapshots)) is selves, drawn


@pytest.fixture
def run_copy(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Path:
    """A copy of the real run, to damage."""
    return copy_of_real_run(tmp_path_factory, tmp_path)


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_league_state_is_one_line_naming_it(run_copy, case):
    change, message = DAMAGE[case]
    edit_state(run_copy, change)
    with pytest.raises(ConfigError) as caught:
        load_league(run_copy)
    text = str(caught.value)
    assert text.startswith(f"{state_path(run_copy)}: ") and message in text, text
    assert text.count(str(state_path(run_copy))) == 1 and "\n" not in text and len(text) <= 300


@pytest.mark.parametrize("case", list(RAW))
def test_a_league_state_that_is_no_json_object_is_one_line(run_copy, case):
    content, message = RAW[case]
    path = state_path(run_copy)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ConfigError, match="^" + str(path).replace(".", r"\.") + ": ") as caught:
        load_league(run_copy)
    assert message in str(caught.value)


def test_the_real_state_is_taken_up_whole(run_copy):
    saved = json.loads(state_path(run_copy).read_text())
    league, notes = load_league(run_copy)
    assert notes == []
    assert list(league.snapshots) == saved["snapshots"]
    for name, r in saved["records"].items():
        record = league.records[name]
        assert (record.wins, record.draws, record.losses, record.recent) == (
            r["wins"], r["draws"], r["losses"], r["recent"])
    assert list(league._rng.getstate()[1]) == saved["rng"]
    assert league._last_snapshot_version == saved["last_snapshot_version"]


def test_a_deleted_league_state_restarts_the_records_and_says_so(run_copy):
    snapshots = json.loads(state_path(run_copy).read_text())["snapshots"]
    state_path(run_copy).unlink()
    league, notes = load_league(run_copy)
    assert notes == [f"{state_path(run_copy)} is missing: the league's records start again from zero; "
                     f"its {len(snapshots)} snapshot(s) stay in the pool"]
    assert list(league.snapshots) == snapshots
    assert all(r.games == 0 for r in league.records.values())
    assert league._last_snapshot_version == max(int(s[1:]) for s in snapshots)


def test_a_league_state_that_is_a_directory_is_one_line(run_copy):
    state_path(run_copy).unlink()
    state_path(run_copy).mkdir()
    with pytest.raises(ConfigError, match="is a directory, not the league's state file"):
        load_league(run_copy)


def test_a_league_folder_that_is_a_file_is_one_line(run_copy):
    shutil.rmtree(run_copy / "league")
    (run_copy / "league").write_text("")
    with pytest.raises(ConfigError, match=r"league is not a directory \(the league's snapshots and league\.json\)$"):
        load_league(run_copy)


@pytest.mark.parametrize(("sim", "hidden", "message"), [
    (SimConfig(obs_reach=True), (16, 16), "was trained on another observation layout"),
    (SimConfig(action_mode="continuous"), (16, 16), "action_mode"),
    (SimConfig(), (8,), "another network than the learner's (snapshot, learner): {'hidden_sizes': ([8], [16, 16])}"),
], ids=["layout", "action mode", "network"])
def test_a_snapshot_that_cannot_play_in_this_run_is_refused_on_resume(run_copy, sim, hidden, message):
    file = foreign_snapshot(run_copy / "league", sim, hidden)
    with pytest.raises(ConfigError) as caught:
        load_league(run_copy)
    text = str(caught.value)
    assert text.startswith(f"league snapshot {file} cannot play in this run: ") and message in text, text
    assert "\n" not in text


def test_the_snapshot_check_is_the_round_robins(run_copy):
    """``evaluate --round-robin`` refuses the same snapshot with the same words."""
    from pipeline.evaluation.entrants import check_entrants
    file = foreign_snapshot(run_copy / "league", SimConfig(obs_reach=True))
    with pytest.raises(ValueError) as evaluated:
        check_entrants([str(file)], SimConfig(), "cpu")
    with pytest.raises(ConfigError) as resumed:
        load_league(run_copy)
    assert str(evaluated.value) in str(resumed.value)


@pytest.mark.parametrize("case", REFUSED)
def test_resume_refuses_a_damaged_league_in_one_line_and_writes_nothing(run_copy, capsys, case):
    named = damage(run_copy, case)
    before = tree(run_copy)
    assert main(resume_argv(run_copy)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(named), lines
    assert tree(run_copy) == before


def test_a_checkpoint_whose_league_state_cannot_be_written_is_still_named(tmp_path):
    """The run's checkpoint is written before ``league.json``: a league state that cannot be
    written (here a directory in its place) leaves the checkpoint named as written."""
    from pipeline.run.parts import build
    from pipeline.run.progress import RunProgress
    run_dir = tmp_path / "fresh"
    run_dir.mkdir()
    config = resolve(parse_config(league_argv(run_dir, 8 * T * B)), "cpu")
    parts = build(config, Metrics(), run_dir)
    try:
        progress = RunProgress(parts, Metrics(), _Silent(), _log(), run_dir, 0, "sync")
        try:
            assert parts.league is not None
            state_path(run_dir).mkdir(parents=True)
            with pytest.raises(LeagueStateNotWritten, match=r"league state .*league\.json not written: is a directory"):
                progress.save_checkpoint()
            assert progress.checkpoint_path is not None and progress.checkpoint_path.is_file()
        finally:
            progress.progress_log.close()
    finally:
        parts.close()


class _Silent:
    def update(self, progress: object) -> None: ...
    def message(self, text: str) -> None: ...
    def close(self) -> None: ...


def _log():
    import logging
    return logging.getLogger("test_league_state")
