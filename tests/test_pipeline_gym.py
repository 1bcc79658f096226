"""``pipeline.launch --env``: any Gymnasium env trains through the same ring, learner,
checkpoints and end-of-run evaluation; options and spaces it cannot use are refused."""

from __future__ import annotations

import pytest

from learner.checkpoint import read_checkpoint
from pipeline.config import ConfigError, resolve
from pipeline.config.devices import usable_cores
from pipeline.envs.choice import default_workers
from pipeline.launch import main

BASE = ["--device", "cpu", "--display", "plain", "--metrics-port", "-1", "--actors", "2"]


def test_cartpole_trains_through_the_pipeline(tmp_path, capsys):
    code = main([*BASE, "--env", "gym:CartPole-v1", "--total-steps", "8192", "--sync",
                 "--run-dir", str(tmp_path / "run"), "--set", "run.eval_episodes=8", "--debug"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "samples: produced 8192 = consumed 8192 + dropped 0 + in flight 0" in out
    assert "mean return (last 100 episodes):" in out
    assert "gym:CartPole-v1: mean return" in out and "over 8 episodes" in out
    state = read_checkpoint(tmp_path / "run" / "checkpoints" / "latest.pt")
    assert state["extra"]["agent_steps"] == 8192
    assert state["obs_layout"] == {"env": "gym:CartPole-v1", "size": 4}
    toml = (tmp_path / "run" / "config.toml").read_text()
    assert "env = \"gym:CartPole-v1\"" in toml and "workers_per_actor = 0" in toml
    # pipeline.evaluate knows the env from the checkpoint.
    from pipeline.evaluate import main as evaluate

    payload = evaluate(["--agent", str(tmp_path / "run"), "--episodes", "6", "--deterministic"])
    assert payload["env"] == "gym:CartPole-v1" and payload["episodes"] == 6
    assert payload["ci95"][0] <= payload["mean_return"] <= payload["ci95"][1]


@pytest.mark.slow
def test_worker_processes_step_the_envs_and_are_gone_after_the_run(tmp_path, capsys):
    import multiprocessing

    code = main([*BASE, "--env", "gym:CartPole-v1", "--workers-per-actor", "2", "--total-steps",
                 "4096", "--run-dir", str(tmp_path / "run"), "--set", "run.eval_episodes=2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "(2 workers per actor)" in out
    assert "samples: produced 4096 = consumed 4096" in out
    assert multiprocessing.active_children() == []


def test_continuous_actions_and_env_kwargs(tmp_path, capsys):
    code = main([*BASE, "--env", "gym:Pendulum-v1", "--env-kwargs", '{"g": 9.81}',
                 "--total-steps", "1024", "--run-dir", str(tmp_path / "run"),
                 "--set", "run.eval_episodes=2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "gym:Pendulum-v1: mean return" in out
    assert "[actors.env_kwargs]\ng = 9.81" in (tmp_path / "run" / "config.toml").read_text()


@pytest.mark.parametrize(("extra", "message"), [
    (["--env", "gym:NoSuchEnv-v0"], "env gym:NoSuchEnv-v0: cannot be made"),
    (["--env", "gym:CartPole-v1", "--opponent", "crank"], "actors.opponent does not apply to --env gym:CartPole-v1"),
    (["--env", "gym:CartPole-v1", "--reward", "outcome"], "actors.reward does not apply"),
    (["--env", "gym:CartPole-v1", "--time-scale", "2"], "[sim] options (time_scale) do not apply"),
    (["--env", "tests.envs_for_pipeline:dict_obs"], "observation space Dict"),
    (["--env", "tests.envs_for_pipeline:text_actions"], "action space Text"),
    (["--env", "tests.envs_for_pipeline:raises"], "cannot be made: RuntimeError: this env cannot be built"),
    (["--env", "nocolon"], "actors.env must be 'midrange', 'gym:ID' or 'package.module:factory'"),
])
def test_what_a_gymnasium_run_cannot_use_is_refused(tmp_path, capsys, extra, message):
    assert main([*BASE, "--run-dir", str(tmp_path / "run"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_envs_is_not_a_prefix_of_envs_per_actor(capsys):
    with pytest.raises(SystemExit):
        main(["--envs", "4"])
    assert "unrecognized arguments: --envs" in capsys.readouterr().err


def test_workers_per_actor_defaults_by_a_rule_not_by_timing():
    cheap = resolve({"actors": {"env": "gym:CartPole-v1", "count": 1}})
    assert cheap.actors.workers_per_actor == 0  # Gymnasium's own env: in the actor's process
    fast = {"env": "tests.envs_for_workers:CounterEnv", "count": 1, "envs_per_actor": 4,
            "env_kwargs": {"length": 1000}}
    slow = {**fast, "env_kwargs": {"length": 1000, "delay_s": 0.002, "slow_seeds": [0, 1, 2, 3]}}
    chosen = resolve({"actors": dict(fast)}).actors.workers_per_actor
    # Any other env: the cores shared between the actors, whatever a step costs.
    assert chosen == default_workers("tests.envs_for_workers:CounterEnv", 4, 1, usable_cores()) >= 1
    assert resolve({"actors": dict(slow)}).actors.workers_per_actor == chosen
    resolved = resolve({"actors": dict(slow)})
    assert resolve(resolved.to_dict()).actors.workers_per_actor == chosen  # written down, kept
    assert resolve({"actors": {**slow, "workers_per_actor": 0}}).actors.workers_per_actor == 0
    # Nothing is stepped to choose; an env that cannot be built is refused by the check that
    # makes and resets it once in a process of its own, naming it.
    with pytest.raises(ConfigError, match=r"tests\.envs_for_pipeline:raises: cannot be made"):
        resolve({"actors": {"env": "tests.envs_for_pipeline:raises"}})


def test_default_workers_follow_the_env_and_the_cores():
    assert default_workers("gym:CartPole-v1", envs_per_actor=4, actors=1, cores=16) == 0
    assert default_workers("gym:Pendulum-v1", envs_per_actor=4, actors=1, cores=16) == 0
    assert default_workers("mypkg.envs:make", envs_per_actor=4, actors=4, cores=2) == 1
    assert default_workers("mypkg.envs:make", envs_per_actor=4, actors=1, cores=16) == 4
    assert default_workers("mypkg.envs:make", envs_per_actor=8, actors=2, cores=8) == 4
    assert default_workers("mypkg.envs:make", envs_per_actor=6, actors=1, cores=4) == 3  # divides 6
    assert default_workers("gym:NoSuchEnv-v0", envs_per_actor=4, actors=1, cores=2) == 2
