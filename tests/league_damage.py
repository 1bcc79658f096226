"""Shared by the league-state tests: a real league run to damage (made once, copied for each
case), the kinds of damage a ``league.json`` can take with the message each must give, a
snapshot of another run, and the launcher as a real process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import save_checkpoint
from pipeline.config import resolve
from pipeline.config.flags import parse_config
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


_REAL_RUNS: dict[Path, Path] = {}


def copy_of_real_run(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Path:
    """A copy, in ``tmp_path``, of a real league run of 4 updates (made once per session):
    snapshots v2 and v4, league.json with games against the anchors (episodes of at most 2 s,
    so that there are some)."""
    base = tmp_path_factory.getbasetemp()
    if base not in _REAL_RUNS:
        from pipeline.launch import run
        run_dir = tmp_path_factory.mktemp("league_state") / "run"
        result = run(resolve(parse_config(league_argv(run_dir, 8 * T * B)), "cpu"))
        assert result.exit_code == 0
        state = json.loads((run_dir / "league" / "league.json").read_text())
        assert state["snapshots"] and sum(r["wins"] + r["draws"] + r["losses"] for r in state["records"].values())
        _REAL_RUNS[base] = run_dir
    return Path(shutil.copytree(_REAL_RUNS[base], tmp_path / "run"))


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


def foreign_snapshot(folder: Path, sim: SimConfig, hidden: tuple[int, ...] = (16, 16)) -> Path:
    """A snapshot of another run dropped into ``folder``, newer than every snapshot there."""
    layout = ObsLayout.from_config(sim)
    learner = PPOLearner(PPOConfig(hidden_sizes=hidden), layout.size, ActionSpec.for_sim(sim),
                         obs_layout=layout.metadata())
    learner.policy_version = 10_000
    return save_checkpoint(folder, learner, keep_last=100)


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
