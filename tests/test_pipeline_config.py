"""The config tree: defaults by device, TOML round trip, overrides, errors naming the field."""

from __future__ import annotations

import dataclasses
import logging
import typing

import pytest

from learner import PPOConfig
from pipeline.config import ConfigError, PipelineConfig, resolve
from pipeline.config.files import (
    apply_override,
    check_writable,
    load_toml,
    parse_toml,
    parse_value,
    to_toml,
)
from pipeline.run.display import Display, Progress, make_display


def test_resolve_fills_device_defaults():
    cpu = resolve({}, "cpu")
    gpu = resolve({}, "cuda:0")
    assert cpu.actors.envs_per_actor < gpu.actors.envs_per_actor
    assert cpu.run.total_steps < gpu.run.total_steps
    assert cpu.ring.slots == 2 * cpu.actors.count
    assert cpu.run.compile_sim is False and gpu.run.compile_sim is True
    assert gpu.run.actor_threads == gpu.actors.count
    assert 1 <= cpu.run.actor_threads <= cpu.actors.count
    assert cpu.samples_per_chunk == cpu.actors.envs_per_actor * cpu.actors.rollout_len
    # The learner's network and schedule are chosen here too, and written down.
    assert cpu.ppo.hidden_sizes == (64, 64) and gpu.ppo.hidden_sizes == PPOConfig().hidden_sizes
    assert cpu.ppo.total_updates == -(-cpu.run.total_steps // cpu.samples_per_batch)
    assert cpu.ppo.seed == cpu.run.seed
    # Explicit values are kept.
    r = resolve({"actors": {"envs_per_actor": 3, "rollout_len": 5}, "run": {"total_steps": 7},
                 "ppo": {"num_minibatches": 1}}, "cuda:0")
    assert (r.actors.envs_per_actor, r.actors.rollout_len, r.run.total_steps) == (3, 5, 7)


def test_a_resolved_config_holds_no_unchosen_value():
    def walk(node, where):
        if dataclasses.is_dataclass(node):
            for f in dataclasses.fields(node):
                walk(getattr(node, f.name), f"{where}.{f.name}")
        else:
            assert node is not None or where == "config.ppo.target_kl", where  # None: "never"

    walk(resolve({}, "cpu"), "config")
    hints = typing.get_type_hints(PipelineConfig)
    for section in ("run", "actors", "ring", "intake"):
        for name, hint in typing.get_type_hints(hints[section]).items():
            assert type(None) not in typing.get_args(hint), f"{section}.{name} is optional"


def test_cuda_caps_actors_at_the_stream_pool():
    ok = resolve({"actors": {"count": 32}}, "cuda:0")
    assert ok.actors.count == 32
    with pytest.raises(ConfigError, match=r"actors\.count is 33.*stream"):
        resolve({"actors": {"count": 33}}, "cuda:0")
    assert resolve({"actors": {"count": 33}}, "cpu").actors.count == 33


def test_toml_round_trip_of_a_resolved_config(tmp_path):
    config = resolve({"sim": {"time_scale": 2.0}, "ppo": {"hidden_sizes": [8, 8]}}, "cpu")
    path = tmp_path / "c.toml"
    path.write_text(to_toml(config.to_dict()))
    assert resolve(load_toml(path)) == config
    # The file is the whole truth: resolved for another device it keeps every value but the device.
    on_gpu = resolve(load_toml(path), "cuda:0")
    assert on_gpu.ppo == config.ppo and on_gpu.actors == config.actors and on_gpu.ring == config.ring
    assert on_gpu.run == dataclasses.replace(config.run, device="cuda:0")


def test_derived_ppo_fields_cannot_be_set():
    with pytest.raises(ConfigError, match=r"ppo.total_updates is derived"):
        resolve({"ppo": {"total_updates": 5}}, "cpu")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"bogus": {}}, "unknown config section(s): bogus"),
        ({"run": {"sync": "yes"}}, "run.sync must be true or false"),
        ({"run": {"log_interval_s": 0}}, "run.log_interval_s must be in (0, 86400], got 0"),
        ({"ring": {"placement": "gpu"}}, "ring.placement must be one of"),
        ({"intake": {"max_policy_lag": -1}}, "intake.max_policy_lag must be an integer in [0, 1000000000], got -1"),
        ({"learner": {"max_policy_lag": 1}}, "unknown config section(s): learner"),
        ({"ppo": {"num_minibatches": 3}}, "ppo.num_minibatches (3) must divide the batch"),
        ({"actors": {"learning_side": 2}}, "actors.learning_side must be an integer in [0, 1], got 2"),
        ({"sim": {"dt_s": -1.0}}, "sim: dt_s must be in [0.001, 1], got -1.0"),
        ({"run": []}, "[run] must be a table"),
    ],
)
def test_bad_values_name_the_field(data, message):
    with pytest.raises(ConfigError) as exc:
        resolve(data, "cpu")
    assert message in str(exc.value)


def test_parse_value_and_nested_override():
    assert parse_value("3") == 3 and parse_value("1.5") == 1.5 and parse_value("true") is True
    assert parse_value("[1, 2]") == [1, 2] and parse_value("crank") == "crank"
    data: dict = {}
    apply_override(data, "sim.fighter.lift_to_drag", 6.0)
    assert resolve(data, "cpu").sim.fighter.lift_to_drag == 6.0
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


def test_toml_writes_every_string_and_key_back_as_it_was():
    data = {"run": {"run_dir": 'a "quoted" back\\slash\ttab\nline\x00nul\x7fdel \u00e9'},
            "actors": {"env_kwargs": {"a b": 1, "x.y": "z", "": [1, 2.5], "t": {"k": True}}}}
    assert parse_toml(to_toml(data)) == data


def test_check_writable_refuses_what_config_toml_cannot_hold():
    check_writable("actors.env_kwargs", {"g": 9.8, "n": [1, 2], "t": {"k": "v"}})
    for bad in ({"a": None}, {"a": [{"b": 1}]}, {"a": float("nan")}):
        with pytest.raises(ConfigError, match=r"^actors\.env_kwargs must be a table of strings"):
            check_writable("actors.env_kwargs", bad)


def test_set_values_and_config_files_are_bounded(tmp_path):
    with pytest.raises(ConfigError, match=r"nested 40 deep \(at most 32\)"):
        parse_value("[" * 40 + "]" * 40)
    assert parse_value("[" * 32 + "]" * 32) is not None
    assert parse_value('"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["') == "[" * 38  # inside a string
    with pytest.raises(ConfigError, match=r"a value of 70000 characters \(at most 65536\)"):
        parse_value("x" * 70_000)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_toml("/dev/zero")
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * ((1 << 20) + 1))
    with pytest.raises(ConfigError, match="is larger than 1 MiB"):
        load_toml(big)
    exact = tmp_path / "exact.toml"
    exact.write_bytes(b"#" * (1 << 20))
    assert load_toml(exact) == {}
