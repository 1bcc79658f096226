"""The config tree: defaults by device, TOML round trip, overrides, errors naming the field."""

from __future__ import annotations

import logging

import pytest

from pipeline.config import (
    ConfigError,
    PipelineConfig,
    apply_override,
    from_dict,
    load_toml,
    parse_value,
    resolve,
    to_toml,
)
from pipeline.display import Display, Progress, make_display


def test_resolve_fills_device_defaults():
    cpu = resolve(PipelineConfig(), "cpu")
    gpu = resolve(PipelineConfig(), "cuda:0")
    assert cpu.actors.envs_per_actor < gpu.actors.envs_per_actor
    assert cpu.run.total_steps < gpu.run.total_steps
    assert cpu.ring.slots == 2 * cpu.actors.count
    assert cpu.run.compile_sim is False and gpu.run.compile_sim is True
    assert gpu.run.actor_threads == gpu.actors.count
    assert 1 <= cpu.run.actor_threads <= cpu.actors.count
    assert cpu.samples_per_chunk == cpu.actors.envs_per_actor * cpu.actors.rollout_len
    # Explicit values are kept.
    explicit = from_dict({"actors": {"envs_per_actor": 3, "rollout_len": 5}, "run": {"total_steps": 7}})
    r = resolve(explicit, "cuda:0")
    assert (r.actors.envs_per_actor, r.actors.rollout_len, r.run.total_steps) == (3, 5, 7)


def test_cuda_caps_actors_at_the_stream_pool():
    ok = resolve(from_dict({"actors": {"count": 32}}), "cuda:0")
    assert ok.actors.count == 32
    with pytest.raises(ConfigError, match=r"actors\.count is 33.*stream"):
        resolve(from_dict({"actors": {"count": 33}}), "cuda:0")
    assert resolve(from_dict({"actors": {"count": 33}}), "cpu").actors.count == 33


def test_toml_round_trip_of_a_resolved_config(tmp_path):
    config = resolve(from_dict({"sim": {"time_scale": 2.0}, "ppo": {"hidden_sizes": [8, 8]}}), "cpu")
    path = tmp_path / "c.toml"
    path.write_text(to_toml(config.to_dict()))
    again = from_dict(load_toml(path))
    assert again.sim == config.sim and again.run == config.run and again.actors == config.actors
    assert again.ppo == {"hidden_sizes": [8, 8]}


def test_unresolved_samples_per_chunk_is_an_error():
    with pytest.raises(ConfigError, match="needs a resolved config"):
        _ = PipelineConfig().samples_per_chunk


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"bogus": {}}, "unknown config section(s): bogus"),
        ({"run": {"sync": "yes"}}, "run.sync must be true or false"),
        ({"run": {"log_interval_s": 0}}, "run.log_interval_s must be > 0"),
        ({"ring": {"placement": "gpu"}}, "ring.placement must be one of"),
        ({"learner": {"max_policy_lag": -1}}, "learner.max_policy_lag must be >= 0"),
        ({"actors": {"learning_side": 2}}, "actors.learning_side must be 0 or 1"),
        ({"sim": {"dt_s": -1.0}}, "sim: dt_s must be finite and > 0"),
        ({"run": []}, "[run] must be a table"),
    ],
)
def test_bad_values_name_the_field(data, message):
    with pytest.raises(ConfigError) as exc:
        from_dict(data)
    assert message in str(exc.value)


def test_parse_value_and_nested_override():
    assert parse_value("3") == 3 and parse_value("1.5") == 1.5 and parse_value("true") is True
    assert parse_value("[1, 2]") == [1, 2] and parse_value("crank") == "crank"
    data: dict = {}
    apply_override(data, "sim.fighter.lift_to_drag", 6.0)
    assert from_dict(data).sim.fighter.lift_to_drag == 6.0
    with pytest.raises(ConfigError, match=r"section\.field"):
        apply_override(data, "nodot", 1)


def progress(**changes) -> Progress:
    base = dict(
        mode="async", device="cpu", elapsed_s=3.0, agent_steps=100, total_steps=200,
        agent_steps_per_s=50.0, updates=2, updates_per_s=0.5, policy_version=2,
        policy_lag_mean=1.5, win_rate=0.25, draw_rate=0.25, loss_rate=0.5, episodes=8,
        opponent="crank", ring_ready=1, ring_free=3, dropped_chunks=0, actor_failures=0,
    )
    base.update(changes)
    return Progress(**base)


def test_plain_display_echoes_and_logs(capsys, caplog):
    log = logging.getLogger("test.display")
    with caplog.at_level(logging.INFO, logger="test.display"):
        display = make_display("plain", log)
        assert type(display) is Display
        display.update(progress())
    out = capsys.readouterr().out
    assert "steps 100/200" in out and "win/draw/loss 25.0%/25.0%/50.0% of 8 vs crank" in out
    assert "lag 1.50" in caplog.text
    quiet = make_display("none", log)
    quiet.update(progress())
    assert capsys.readouterr().out == ""
