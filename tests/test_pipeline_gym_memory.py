"""A run on a Gymnasium env is sized from the env's spaces before anything is written or
allocated: one that would not fit in RAM or in /dev/shm is one line and exit 2."""

from __future__ import annotations

import pytest
import torch

from learner import ActionSpec, ActorCritic
from pipeline.config import ConfigError, resolve
from pipeline.envs.choice import EnvFactory, probe
from pipeline.launch import main
from pipeline.run.gym_memory import check_fits, gym_memory_need, network_bytes
from tests.envs_for_gym_runs import our_shared_segments

HUGE_ENV = "tests.envs_for_gym_runs:HugeObservationEnv"
BASE = ["--device", "cpu", "--display", "plain", "--metrics-port", "-1"]


def test_a_gym_run_too_big_for_memory_is_refused_before_anything_is_written(tmp_path, capsys):
    before = our_shared_segments()
    code = main([*BASE, "--actors", "2", "--envs-per-actor", "64", "--env", HUGE_ENV,
                 "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: this run needs about ")
    assert "(2 actors × 64 envs, observations of 19 MiB: networks " in err
    assert "but cpu has " in err and "lower actors.envs_per_actor" in err
    assert not (tmp_path / "run").exists()
    assert our_shared_segments() == before


def test_the_memory_of_a_gym_run_is_counted_from_its_spaces():
    # The run of the report: 5,000,000 floats, 2 actors × 8 envs (it reached 12.6 GB resident
    # before failing, with a 5.1 GB segment per ring slot).
    config = resolve({"actors": {"env": HUGE_ENV, "count": 2, "envs_per_actor": 8}})
    spaces = probe(EnvFactory(HUGE_ENV))
    need = gym_memory_need(config, spaces)
    slot = 32 * 8 * 5_000_000 * 4
    assert need.observation == 5_000_000 * 4
    assert config.ring.slots * slot <= need.ring < config.ring.slots * slot * 1.01
    assert need.shared >= need.ring  # the slots are shared-memory segments on a CPU
    assert need.total > 12.6e9


def test_network_bytes_are_the_policys_own():
    config = resolve({"actors": {"env": "gym:CartPole-v1"}})
    spaces = probe(EnvFactory("gym:CartPole-v1"))
    ppo = config.ppo
    net = ActorCritic(spaces.obs_dim, ActionSpec.from_gym(spaces.action_space), ppo.hidden_sizes,
                      ppo.activation, ppo.normalize_obs, ppo.obs_norm_clip)
    state: list[torch.Tensor] = [*net.parameters(), *net.buffers()]
    assert network_bytes(config, spaces) == sum(t.numel() * t.element_size() for t in state)


def test_ram_and_dev_shm_are_each_checked():
    config = resolve({"actors": {"env": "gym:CartPole-v1"}})
    need = gym_memory_need(config, probe(EnvFactory("gym:CartPole-v1")))
    check_fits(need, config, available=need.total, shared_free=need.shared)
    check_fits(need, config, available=need.total, shared_free=None)  # no /dev/shm: not checked
    with pytest.raises(ConfigError, match=r"^this run needs about .* but cpu has .* available; lower "):
        check_fits(need, config, available=need.total - 1, shared_free=None)
    with pytest.raises(ConfigError, match=r"^this run's shared-memory segments .* but /dev/shm has .* free; lower "):
        check_fits(need, config, available=need.total, shared_free=need.shared - 1)
