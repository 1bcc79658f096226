"""A resumed league's state, damaged: ``RUN/league/league.json`` and the snapshots beside it are
checked before anything is trained (one line naming the file, exit 2), a deleted
``league.json`` restarts the records with a message, and a snapshot that cannot be written (a
full disk) is left out of a run that goes on.

The run they damage is a real one (``real_run``); each case damages a copy of it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import load_policy, save_checkpoint
from monitoring import Metrics
from pipeline.config import ConfigError, PipelineConfig, resolve
from pipeline.config.flags import parse_config
from pipeline.launch import main, run
from pipeline.league.matchmaking import League
from pipeline.league.pool import LeagueStateNotWritten
from pipeline.league.resuming import resume_league
from pipeline.league.state import RNG_WORDS
from sim import ObsLayout, SimConfig

T, B = 8, 8
ROOT = Path(__file__).resolve().parents[1]
QUIET = ["--display", "none", "--metrics-port", "-1"]


def league_argv(run_dir: Path, steps: int) -> list[str]:
    return ["--actors", "2", "--envs-per-actor", str(B), "--rollout-len", str(T),
            "--total-steps", str(steps), "--opponent", "league", "--sync", "--device", "cpu",
            *QUIET, "--run-dir", str(run_dir), "--set", "run.eval_episodes=0",
            "--set", "ppo.hidden_sizes=[16, 16]", "--set", "ppo.update_epochs=1",
            "--set", "league.groups_per_actor=2", "--set", "league.hold_chunks=2",
            "--set", "league.snapshot_every=2", "--set", "league.snapshot_clock=updates",
            "--set", "league.max_snapshots=3", "--set", "sim.max_time_s=2.0"]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real league run of 4 updates: snapshots v2 and v4, league.json with games against
    the anchors (episodes of at most 2 s, so that there are some)."""
    run_dir = tmp_path_factory.mktemp("league_state") / "run"
    result = run(resolve(parse_config(league_argv(run_dir, 8 * T * B)), "cpu"))
    assert result.exit_code == 0
    state = json.loads((run_dir / "league" / "league.json").read_text())
    assert state["snapshots"] and sum(r["wins"] + r["draws"] + r["losses"] for r in state["records"].values())
    return run_dir


@pytest.fixture
def copy(real_run, tmp_path) -> Path:
    """A copy of the real run, to damage."""
    return Path(shutil.copytree(real_run, tmp_path / "run"))


def resume_config(run_dir: Path) -> PipelineConfig:
    return resolve(parse_config(["--resume", str(run_dir), *QUIET]), "cpu")


def load_league(run_dir: Path) -> tuple[League, list[str]]:
    """The league a ``--resume`` of ``run_dir`` takes up, through the launcher's own function."""
    config = resume_config(run_dir)
    league = League(config.league, run_dir / "league", config.run.seed, lambda: load_policy(run_dir))
    notes = resume_league(league, run_dir, config)
    return league, notes


def state_path(run_dir: Path) -> Path:
    return run_dir / "league" / "league.json"


def edit_state(run_dir: Path, change: Callable[[dict[str, Any]], object]) -> None:
    path = state_path(run_dir)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def crank(data: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = data["records"]["crank"]
    return record


def put(key: str, value: object) -> Callable[[dict[str, Any]], object]:
    return lambda d: d.__setitem__(key, value)


def put_crank(key: str, value: object) -> Callable[[dict[str, Any]], object]:
    return lambda d: crank(d).__setitem__(key, value)


def drop_crank(key: str) -> Callable[[dict[str, Any]], object]:
    return lambda d: crank(d).pop(key)


def put_rng(index: int, value: int) -> Callable[[dict[str, Any]], object]:
    return lambda d: d["rng"].__setitem__(index, value)


def newest_snapshot(d: dict[str, Any]) -> int:
    return max(int(s[1:]) for s in d["snapshots"])


DAMAGE: dict[str, tuple[Callable[[dict[str, Any]], object], str]] = {
    "version 2": (put("version", 2), "format version 2, this code reads 1"),
    "version true": (put("version", True), "format version True"),
    "no records": (lambda d: d.pop("records"), "missing field(s): records"),
    "no rng": (lambda d: d.pop("rng"), "missing field(s): rng"),
    "unknown field": (put("extra", 1), "unknown field(s): extra"),
    "records a list": (put("records", []), "records must be a JSON object, got list []"),
    "record a number": (lambda d: d["records"].__setitem__("crank", 3), "records.crank must be a JSON object"),
    "wins missing": (drop_crank("wins"), "records.crank is missing wins"),
    "wins not a number": (put_crank("wins", "many"), "records.crank.wins must be an integer, got 'many'"),
    "wins a fraction": (put_crank("wins", 2.5), "records.crank.wins must be an integer, got 2.5"),
    "wins 1e30": (put_crank("wins", 1e30), "records.crank.wins must be an integer, got 1e+30"),
    "wins 10**30": (put_crank("wins", 10**30), "games, more than the"),
    "negative losses": (put_crank("losses", -3), "records.crank.losses must be >= 0, got -3"),
    "recent short": (put_crank("recent", [1.0, 0.0]), "records.crank.recent must be a list of 3 numbers"),
    "recent NaN": (put_crank("recent", [0.0, float("nan"), 0.0]), "records.crank.recent[1] must be a finite number, got nan"),
    "recent infinite": (put_crank("recent", [float("inf"), 0.0, 0.0]), "records.crank.recent[0] must be a finite number, got inf"),
    "recent negative": (put_crank("recent", [-1.0, 0.0, 0.0]), "records.crank.recent must hold counts >= 0"),
    "recent above total": (lambda d: crank(d).update(wins=1, recent=[5.0, 0.0, 0.0]),
                           "counts more wins than its total 1"),
    "an anchor's record missing": (lambda d: d["records"].pop("shooter"), "missing: shooter; not in the pool: none"),
    "a record of nobody": (lambda d: d["records"].__setitem__("v99999", crank(d)), "not in the pool: v99999"),
    "an anchor twice": (lambda d: d["anchors"].append("crank"), "name a player twice"),
    "a snapshot not so named": (lambda d: d["snapshots"].append("best"), "'best' is no snapshot name"),
    "rng oversized": (lambda d: d["rng"].extend([1] * 10_000), f"rng must hold {RNG_WORDS + 1} integers"),
    "rng short": (lambda d: d.__setitem__("rng", d["rng"][:5]), f"rng must hold {RNG_WORDS + 1} integers"),
    "rng word too large": (put_rng(3, 2**64), "rng[3] must be a 32-bit word"),
    "rng not numbers": (put_rng(0, "x"), "rng[0] must be an integer, got 'x'"),
    "rng all zeros": (lambda d: d.__setitem__("rng", [0] * RNG_WORDS + [RNG_WORDS]), "rng holds only zeros"),
    "rng position": (put_rng(RNG_WORDS, 700), f"rng[{RNG_WORDS}] is the position in the state"),
    "snapshot version 1e18": (put("last_snapshot_version", 10**18), "is newer than the run's newest checkpoint"),
    "snapshot version a float": (put("last_snapshot_version", 1e18), "last_snapshot_version must be an integer"),
    "snapshot version older than a snapshot": (
        lambda d: d.__setitem__("last_snapshot_version", newest_snapshot(d) - 1), "is older than the snapshot"),
}
RAW = {
    "a list": ("[]", "the file must be a JSON object, got list []"),
    "not JSON": ('{"version": 1,', "is not JSON"),
    "empty": ("", "is not JSON"),
    "not text": (b"\xff\xfe\x00", "cannot be read"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_league_state_is_one_line_naming_it(copy, case):
    change, message = DAMAGE[case]
    edit_state(copy, change)
    with pytest.raises(ConfigError) as caught:
        load_league(copy)
    text = str(caught.value)
    assert text.startswith(f"{state_path(copy)}: ") and message in text, text
    assert text.count(str(state_path(copy))) == 1 and "\n" not in text and len(text) <= 300


@pytest.mark.parametrize("case", list(RAW))
def test_a_league_state_that_is_no_json_object_is_one_line(copy, case):
    content, message = RAW[case]
    path = state_path(copy)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ConfigError, match="^" + str(path).replace(".", r"\.") + ": ") as caught:
        load_league(copy)
    assert message in str(caught.value)


def test_the_real_state_is_taken_up_whole(copy):
    saved = json.loads(state_path(copy).read_text())
    league, notes = load_league(copy)
    assert notes == []
    assert list(league.snapshots) == saved["snapshots"]
    for name, r in saved["records"].items():
        record = league.records[name]
        assert (record.wins, record.draws, record.losses, record.recent) == (
            r["wins"], r["draws"], r["losses"], r["recent"])
    assert list(league._rng.getstate()[1]) == saved["rng"]
    assert league._last_snapshot_version == saved["last_snapshot_version"]


def test_a_deleted_league_state_restarts_the_records_and_says_so(copy):
    snapshots = json.loads(state_path(copy).read_text())["snapshots"]
    state_path(copy).unlink()
    league, notes = load_league(copy)
    assert notes == [f"{state_path(copy)} is missing: the league's records start again from zero; "
                     f"its {len(snapshots)} snapshot(s) stay in the pool"]
    assert list(league.snapshots) == snapshots
    assert all(r.games == 0 for r in league.records.values())
    assert league._last_snapshot_version == max(int(s[1:]) for s in snapshots)


def test_a_league_state_that_is_a_directory_is_one_line(copy):
    state_path(copy).unlink()
    state_path(copy).mkdir()
    with pytest.raises(ConfigError, match="is a directory, not the league's state file"):
        load_league(copy)


def test_a_league_folder_that_is_a_file_is_one_line(copy):
    shutil.rmtree(copy / "league")
    (copy / "league").write_text("")
    with pytest.raises(ConfigError, match=r"league is not a directory \(the league's snapshots and league\.json\)$"):
        load_league(copy)


def foreign_snapshot(folder: Path, sim: SimConfig, hidden: tuple[int, ...] = (16, 16)) -> Path:
    """A snapshot of another run dropped into ``folder``, newer than every snapshot there."""
    layout = ObsLayout.from_config(sim)
    learner = PPOLearner(PPOConfig(hidden_sizes=hidden), layout.size, ActionSpec.for_sim(sim),
                         obs_layout=layout.metadata())
    learner.policy_version = 10_000
    return save_checkpoint(folder, learner, keep_last=100)


@pytest.mark.parametrize(("sim", "hidden", "message"), [
    (SimConfig(obs_reach=True), (16, 16), "was trained on another observation layout"),
    (SimConfig(action_mode="continuous"), (16, 16), "action_mode"),
    (SimConfig(), (8,), "another network than the learner's (snapshot, learner): {'hidden_sizes': ([8], [16, 16])}"),
], ids=["layout", "action mode", "network"])
def test_a_snapshot_that_cannot_play_in_this_run_is_refused_on_resume(copy, sim, hidden, message):
    file = foreign_snapshot(copy / "league", sim, hidden)
    with pytest.raises(ConfigError) as caught:
        load_league(copy)
    text = str(caught.value)
    assert text.startswith(f"league snapshot {file} cannot play in this run: ") and message in text, text
    assert "\n" not in text


def test_the_snapshot_check_is_the_round_robins(copy):
    """``evaluate --round-robin`` refuses the same snapshot with the same words."""
    from pipeline.evaluation.entrants import check_entrants
    file = foreign_snapshot(copy / "league", SimConfig(obs_reach=True))
    with pytest.raises(ValueError) as evaluated:
        check_entrants([str(file)], SimConfig(), "cpu")
    with pytest.raises(ConfigError) as resumed:
        load_league(copy)
    assert str(evaluated.value) in str(resumed.value)


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def launch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline.launch", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


REFUSED = ["a list", "recent NaN", "directory", "foreign snapshot"]


def damage(run_dir: Path, case: str) -> str:
    """Damage ``run_dir``'s league as ``case`` says; the start of the error line it must give."""
    if case == "a list":
        state_path(run_dir).write_text("[]")
    elif case == "recent NaN":
        edit_state(run_dir, DAMAGE["recent NaN"][0])
    elif case == "directory":
        state_path(run_dir).unlink()
        state_path(run_dir).mkdir()
    else:
        foreign_snapshot(run_dir / "league", SimConfig(obs_reach=True))
        return f"error: league snapshot {run_dir}"
    return f"error: {state_path(run_dir)}: "


def resume_argv(run_dir: Path) -> list[str]:
    return ["--resume", str(run_dir), "--total-steps", str(16 * T * B), *QUIET]


@pytest.mark.parametrize("case", REFUSED)
def test_resume_refuses_a_damaged_league_in_one_line_and_writes_nothing(copy, capsys, case):
    named = damage(copy, case)
    before = tree(copy)
    assert main(resume_argv(copy)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(named), lines
    assert tree(copy) == before


@pytest.mark.slow
@pytest.mark.parametrize("case", REFUSED)
def test_a_resume_process_refuses_a_damaged_league_in_one_line(copy, case):
    named = damage(copy, case)
    before = tree(copy)
    done = launch(*resume_argv(copy))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(named), done.stderr
    assert tree(copy) == before


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


@pytest.mark.slow
def test_a_run_whose_league_state_cannot_be_written_names_its_checkpoint(real_run, tmp_path):
    """A run started in a directory where ``league.json`` is a directory (a ``--resume`` of a
    run with no checkpoint yet, so no league is read): exit 1, and the summary names the
    checkpoint it wrote."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    state_path(run_dir).mkdir(parents=True)
    config = (real_run / "config.toml").read_text().replace(str(real_run), str(run_dir))
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
def test_a_resume_without_league_state_says_the_records_restart(copy):
    snapshots = json.loads(state_path(copy).read_text())["snapshots"]
    state_path(copy).unlink()
    done = launch("--resume", str(copy), "--total-steps", str(16 * T * B), "--display", "plain",
                  "--metrics-port", "-1")
    assert done.returncode == 0, done.stderr
    assert (f"league: {state_path(copy)} is missing: the league's records start again from zero; "
            f"its {len(snapshots)} snapshot(s) stay in the pool") in done.stdout.splitlines()
    assert state_path(copy).is_file()  # written again with the run's next checkpoint


def _can_mount_tmpfs(where: Path) -> str:
    """Why a private tmpfs cannot be mounted here ('' when it can)."""
    if shutil.which("unshare") is None:
        return "no unshare on this machine"
    where.mkdir()
    probe = subprocess.run(["unshare", "-r", "-m", "sh", "-c", f"mount -t tmpfs -o size=8k tmpfs '{where}'"],
                           capture_output=True, text=True)
    return "" if probe.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {probe.stderr.strip()}"


@pytest.mark.slow
def test_a_snapshot_on_a_full_disk_is_left_out_and_the_run_goes_on(copy, tmp_path):
    """RUN/league on a 40 KiB tmpfs: league.json (about 10 KiB) fits, a snapshot (about 80 KiB)
    does not; the run says so, goes on, and writes its own checkpoints."""
    why = _can_mount_tmpfs(tmp_path / "probe")
    if why:
        pytest.skip(why)
    league, saved, after = copy / "league", tmp_path / "saved", tmp_path / "after"
    shutil.copytree(league, saved)
    after.mkdir()
    newest = max(int(p.stem.split("_")[1]) for p in (copy / "checkpoints").glob("ckpt_*.pt"))
    command = (f"mount -t tmpfs -o size=40k tmpfs '{league}' && cp '{saved}/league.json' '{league}/' && "
               f"{sys.executable} -m pipeline.launch --resume '{copy}' --total-steps {16 * T * B} "
               f"--display plain --metrics-port -1; code=$?; cp -a '{league}/.' '{after}/'; exit $code")
    done = subprocess.run(["unshare", "-r", "-m", "sh", "-c", command], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    pattern = (rf"league: snapshot v(\d+) not written \(no space left on device while writing "
               rf"{re.escape(str(league))}/ckpt_0*\1\.pt\); the run goes on without it, 0 snapshot\(s\) in the pool")
    assert [line for line in done.stdout.splitlines() if re.fullmatch(pattern, line)], done.stdout
    assert "the last good checkpoint" not in done.stdout
    assert sorted(p.name for p in after.iterdir()) == ["league.json"]  # no snapshot, no temporary file
    assert json.loads((after / "league.json").read_text())["snapshots"] == []
    final = torch.load(copy / "checkpoints" / "latest.pt", weights_only=True)["policy_version"]
    assert final > newest  # the run went on to its end
    assert f"checkpoint: {copy}/checkpoints/ckpt_{final:09d}.pt" in done.stdout
