"""The league in whole runs: its pool kept, rated and resumed, its metrics exported, every group
played, bad settings refused, and a round robin of its folder."""

from __future__ import annotations

import json
import random

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from agents.grouped import GroupedOpponent
from monitoring import Metrics
from monitoring.exporter import exposition
from pipeline.config import LeagueConfig, resolve
from pipeline.config.flags import parse_config
from pipeline.launch import main, run
from pipeline.league.matchmaking import League
from pipeline.league.records import LEARNER

T, B = 8, 8


def league_argv(tmp_path, *extra: str, steps: int = 24 * T * B, name: str = "run") -> list[str]:
    return ["--actors", "2", "--envs-per-actor", str(B), "--rollout-len", str(T),
            "--total-steps", str(steps), "--opponent", "league", "--sync",
            "--device", "cpu", "--display", "none", "--metrics-port", "-1",
            "--run-dir", str(tmp_path / name), "--set", "run.eval_episodes=0",
            "--set", "ppo.hidden_sizes=[16, 16]", "--set", "ppo.update_epochs=1",
            "--set", "league.groups_per_actor=2", "--set", "league.hold_chunks=8",
            "--set", "league.snapshot_every=2", "--set", "league.max_snapshots=3", *extra]


def test_a_league_run_keeps_its_pool_rates_it_and_resumes(tmp_path):
    config = resolve(parse_config(league_argv(tmp_path)), "cpu")
    result = run(config)
    assert result.exit_code == 0
    folder = result.run_dir / "league"
    snapshots = sorted(folder.glob("ckpt_*.pt"))
    assert 1 <= len(snapshots) <= 3  # bounded pool, the newest kept
    state = json.loads((folder / "league.json").read_text())
    games = {n: r["wins"] + r["draws"] + r["losses"] for n, r in state["records"].items()}
    assert sum(games.values()) > 0
    assert set(state["anchors"]) == {"crank", "shooter", "random"}
    # Resumed with a bigger budget, the league takes up its snapshots and its counts.
    code = main(["--resume", str(result.run_dir), "--total-steps", str(40 * T * B),
                 "--display", "none", "--metrics-port", "-1"])
    assert code == 0
    later = json.loads((folder / "league.json").read_text())
    for name in ("crank", "shooter", "random"):  # snapshots may have left the pool since
        r = later["records"][name]
        assert r["wins"] + r["draws"] + r["losses"] >= games[name]
    assert set(later["records"]) == {"crank", "shooter", "random", *later["snapshots"]}
    assert max(int(p.stem.split("_")[1]) for p in folder.glob("ckpt_*.pt")) > max(
        int(p.stem.split("_")[1]) for p in snapshots)


def test_league_metrics_are_exported(tmp_path):
    from pipeline.run.parts import build
    from pipeline.run.progress import RunProgress
    config = resolve(parse_config(league_argv(tmp_path)), "cpu")
    metrics = Metrics()
    parts = build(config, metrics, tmp_path / "run")
    assert parts.league is not None
    parts.league.records["crank"].add(3, 1, 6, window=500)
    progress = RunProgress(parts, metrics, _Silent(), _log(), tmp_path, 0, "sync")
    progress.snapshot()
    families = {f.name: f for f in text_string_to_metric_families(exposition(metrics).decode())}
    ratings = {s.labels["player"]: s.value for s in families["midrange_league_rating"].samples}
    assert set(ratings) == {LEARNER, "crank"} and ratings["crank"] > ratings[LEARNER]
    games = {(s.labels["opponent"], s.labels["outcome"]): s.value
             for s in families["midrange_league_games"].samples if s.name.endswith("_total")}
    assert games[("crank", "win")] == 3 and games[("crank", "loss")] == 6


class _Silent:
    def update(self, progress): ...
    def message(self, text): ...
    def close(self): ...


def _log():
    import logging
    return logging.getLogger("test_league")


def test_a_league_plays_every_group_in_the_actors(tmp_path):
    from pipeline.run.parts import build
    config = resolve(parse_config(league_argv(tmp_path)), "cpu")
    parts = build(config, Metrics(), tmp_path / "run")
    assert parts.league is not None
    random.seed(0)
    for actor in parts.actors:
        parts.league.before_chunk(actor)
        assert isinstance(actor.opponent, GroupedOpponent)
        assert actor.opponent.num_groups == 2
    assigned = parts.league.assignments()
    assert set(assigned) == {0, 1}
    assert all(p in ("crank", "shooter", "random") for groups in assigned.values() for p in groups)


@pytest.mark.parametrize(("extra", "message"), [
    (["--set", "league.anchors=[]"], "league.anchors is empty"),
    (["--set", "league.groups_per_actor=3"], "league.groups_per_actor (3) must divide actors.envs_per_actor (8)"),
    (["--set", "league.anchors=['nobody']"], "unknown agent 'nobody'"),
    (["--set", "league.self_play=1.5"], "league.self_play must be in [0, 1]"),
    (["--set", "league.latest=-0.1"], "league.latest must be in [0, 1]"),
    (["--set", "league.snapshot_until=0"], "league.snapshot_until must be in (0, 1]"),
    (["--set", "league.snapshot_clock=seconds"], "league.snapshot_clock must be one of learning, updates"),
])
def test_a_league_that_cannot_play_is_refused(tmp_path, capsys, extra, message):
    assert main(league_argv(tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_a_snapshot_that_fails_to_load_is_named(tmp_path, capsys):
    config = resolve(parse_config(league_argv(tmp_path, steps=8 * T * B)), "cpu")
    result = run(config)
    snapshot = sorted((result.run_dir / "league").glob("ckpt_*.pt"))[-1]
    snapshot.write_bytes(b"not a checkpoint")
    code = main(["--resume", str(result.run_dir), "--total-steps", str(16 * T * B),
                 "--display", "none", "--metrics-port", "-1"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"league snapshot {snapshot}" in err and "fails to load" in err, err


def test_a_round_robin_takes_a_league_folder_as_its_pool(tmp_path):
    from pipeline.evaluate import main as evaluate
    from pipeline.evaluation.entrants import expand_pools
    argv = league_argv(tmp_path, "--set", "league.anchors=['straight', 'random']", steps=8 * T * B)
    config = resolve(parse_config(argv), "cpu")
    folder = run(config).run_dir / "league"
    snapshots = [str(p) for p in sorted(folder.glob("ckpt_*.pt"))]
    assert snapshots
    assert expand_pools([str(folder), "random"]) == [*snapshots, "straight", "random"]
    payload = evaluate(["--round-robin", f"{folder},random", "--episodes", "2", "--batch", "8",
                        "--seed", "1"])
    assert set(payload["ratings"]) == {*snapshots, "straight", "random"}
    League(LeagueConfig(), tmp_path / "empty", 0, lambda: torch.nn.Linear(1, 1)).save()
    with pytest.raises(ValueError, match="holds no snapshot yet"):
        expand_pools([str(tmp_path / "empty")])
    # A damaged league.json is refused as on --resume (pipeline.league.state).
    (tmp_path / "empty" / "league.json").write_text('{"anchors": []}')
    with pytest.raises(ValueError, match=r"empty/league\.json: missing field\(s\): version, snapshots"):
        expand_pools([str(tmp_path / "empty")])
