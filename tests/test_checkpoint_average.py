"""Checkpoint averaging (``learner.checkpoint.average``, ``python -m pipeline.average``): the mean
of a run's checkpoints as a policy-only file that flies like any checkpoint."""

from __future__ import annotations

import re

import pytest
import torch
from test_learner_ppo import random_batch, small_learner

from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_policy,
    read_checkpoint,
    save_checkpoint,
)
from learner.checkpoint.average import (
    average_checkpoints,
    average_states,
    checkpoints_since,
    late_checkpoints,
)
from pipeline import average as average_cli
from pipeline import evaluate as evaluate_cli
from sim.config import SimConfig
from sim.layout import ObsLayout


def _run(tmp_path, learner, updates, steps_per_update=1000):
    """``updates`` updates of ``learner``, a numbered checkpoint after each, recording agent-steps;
    the checkpoints' paths and each one's parameters (name -> tensor)."""
    paths, params = [], []
    for i in range(updates):
        learner.update(random_batch(learner, seed=i))
        paths.append(save_checkpoint(tmp_path, learner, extra={"agent_steps": (i + 1) * steps_per_update},
                                     keep_last=1000))
        params.append({n: p.detach().clone() for n, p in learner.policy.named_parameters()})
    return paths, params


def test_the_average_is_the_mean_of_the_parameters_and_the_newest_buffers(tmp_path):
    learner = small_learner()
    paths, params = _run(tmp_path, learner, 3)
    out = average_checkpoints(paths[::-1], tmp_path / "average.pt", note="three")  # any order
    state = read_checkpoint(out)
    assert state["kind"] == "policy" and state["policy_version"] == 3
    for name, value in state["model"].items():
        if name in params[0]:
            expected = (params[0][name].double() + params[1][name].double() + params[2][name].double()) / 3
            assert torch.allclose(value.double(), expected, atol=1e-7), name
            assert value.dtype == params[0][name].dtype
        else:  # the running observation statistics: the newest checkpoint's
            assert torch.equal(value, learner.policy.state_dict()[name]), name
    assert state["extra"]["averaged"] == {"checkpoints": 3, "policy_versions": [1, 2, 3],
                                          "agent_steps": [1000, 2000, 3000]}
    assert state["extra"]["note"] == "three" and state["extra"]["agent_steps"] == 3000
    # It flies like a checkpoint, and cannot be resumed from.
    policy = load_policy(out)
    assert policy.policy_version == 3
    policy.act(torch.randn(4, 12), deterministic=True)
    with pytest.raises(CheckpointError, match="holds a policy only"):
        load_checkpoint(out, small_learner())


def test_the_average_of_one_checkpoint_is_that_checkpoint(tmp_path):
    learner = small_learner()
    paths, params = _run(tmp_path, learner, 2)
    state = average_states([paths[0]])
    for name, value in params[0].items():
        assert torch.equal(state["model"][name], value), name


def test_the_average_moves_every_parameter_off_the_last_iterate(tmp_path):
    learner = small_learner(learning_rate=1e-2)
    paths, params = _run(tmp_path, learner, 2)
    state = average_states(paths)
    moved = [n for n in params[1] if not torch.equal(state["model"][n], params[1][n])]
    changed = [n for n in params[1] if not torch.equal(params[0][n], params[1][n])]
    assert changed and moved == changed


def test_checkpoints_since_picks_by_agent_steps(tmp_path):
    learner = small_learner()
    paths, _ = _run(tmp_path, learner, 6)
    assert checkpoints_since(tmp_path, 0.5) == paths[2:]  # 3000 of 6000 and after
    assert checkpoints_since(tmp_path, 1.0) == paths[-1:]
    assert checkpoints_since(tmp_path, 0.0) == paths
    with pytest.raises(ValueError, match=r"fraction must be a number in \[0, 1\]"):
        checkpoints_since(tmp_path, 1.5)
    with pytest.raises(CheckpointError, match="no numbered checkpoints"):
        checkpoints_since(tmp_path / "nothing", 0.5)
    bare = tmp_path / "bare"
    save_checkpoint(bare, learner)
    with pytest.raises(CheckpointError, match="records no agent-steps"):
        checkpoints_since(bare, 0.5)


def test_late_checkpoints_take_the_last_n_or_the_late_fraction(tmp_path):
    run = tmp_path / "run"
    paths, _ = _run(run / "checkpoints", small_learner(), 6)
    assert late_checkpoints(run) == (run / "checkpoints", paths[3:])  # 2/3 of 6000: 4000 and after
    assert late_checkpoints(run, fraction=0.5)[1] == paths[2:]
    assert late_checkpoints(run / "checkpoints", last=2)[1] == paths[-2:]
    assert late_checkpoints(run, last=100)[1] == paths
    for kwargs, message in (({"last": 0}, "--last must be at least 1, got 0"),
                            ({"fraction": -0.1}, r"--from must be in \[0, 1\], got -0.1"),
                            ({"fraction": 0.5, "last": 2}, "give --from or --last, not both")):
        with pytest.raises(ValueError, match=message):
            late_checkpoints(run, **kwargs)


def test_checkpoints_of_different_runs_are_refused_naming_the_file(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    paths_a, _ = _run(a, small_learner(), 1)
    wide = small_learner(hidden_sizes=(16, 16))
    paths_b, _ = _run(b, wide, 1)
    with pytest.raises(CheckpointError, match=r"ckpt_000000001\.pt holds a different network"):
        average_states([*paths_a, *paths_b])
    layout = ObsLayout.from_config(SimConfig()).metadata()
    other = ObsLayout.from_config(SimConfig(obs_reach=True)).metadata()
    cfg = PPOConfig(hidden_sizes=(8,))
    spec = ActionSpec("multi_discrete", nvec=(3, 3, 2))
    one = save_checkpoint(tmp_path / "c", PPOLearner(cfg, layout["size"], spec, obs_layout=layout))
    two = PPOLearner(cfg, layout["size"], spec, obs_layout={**other, "size": layout["size"]})
    two.update(random_batch(two))
    with pytest.raises(CheckpointError, match="different observation layout"):
        average_states([one, save_checkpoint(tmp_path / "d", two)])
    with pytest.raises(CheckpointError, match="no checkpoints to average"):
        average_states([])
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(paths_a[0].read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"damaged\.pt"):
        average_states([paths_a[0], damaged])


def _sim_run(tmp_path, updates=3):
    """A run folder whose checkpoints fly in the sim: the sim's layout, agent-steps recorded."""
    layout = ObsLayout.from_config(SimConfig()).metadata()
    learner = PPOLearner(PPOConfig(hidden_sizes=(16,), total_updates=10), layout["size"],
                         ActionSpec("multi_discrete", nvec=(3, 3, 2)), obs_layout=layout)
    return _run(tmp_path / "run" / "checkpoints", learner, updates)


def test_the_command_averages_a_run_and_the_file_is_evaluated_like_a_checkpoint(tmp_path, capsys):
    paths, _ = _sim_run(tmp_path, updates=3)
    out = average_cli.main([str(tmp_path / "run")])
    assert out == tmp_path / "run" / "checkpoints" / "average.pt"
    printed = capsys.readouterr().out
    assert "the mean of 2 checkpoint(s), policy versions 2 to 3, agent-steps 2,000 to 3,000" in printed
    assert read_checkpoint(out)["extra"]["averaged"]["policy_versions"] == [2, 3]
    average_cli.main([str(tmp_path / "run"), "--last", "3", "--out", str(tmp_path / "three.pt")])
    assert read_checkpoint(tmp_path / "three.pt")["extra"]["averaged"]["checkpoints"] == 3
    average_cli.main([str(p) for p in paths[:2]])  # files named: beside the last of them
    assert read_checkpoint(paths[1].parent / "average.pt")["extra"]["averaged"]["policy_versions"] == [1, 2]
    payload = evaluate_cli.main(["--agent", str(out), "--opponents", "straight", "--episodes", "2"])
    assert payload["matches"][0]["episodes"] == 2


@pytest.mark.parametrize(("argv", "message"), [
    (["{run}", "--from", "2"], r"--from must be in \[0, 1\], got 2\.0"),
    (["{run}", "--last", "0"], "--last must be at least 1, got 0"),
    (["{run}", "--from", "0.5", "--last", "2"], "not allowed with argument"),
    (["{run}/checkpoints/ckpt_000000001.pt", "--last", "2"], "--from and --last choose among a run's checkpoints"),
    (["{run}/nowhere"], "no run directory, checkpoints folder or checkpoint file at"),
    (["{run}", "--out", "{run}/no/such/folder/a.pt"], "give a file name in an existing folder"),
    (["{tmp}"], "no numbered checkpoints"),
])
def test_bad_input_is_one_line_and_exit_status_2(tmp_path, capsys, argv, message):
    _sim_run(tmp_path, updates=1)
    run, tmp = tmp_path / "run", tmp_path
    with pytest.raises(SystemExit) as exc:
        average_cli.run([a.format(run=run, tmp=tmp) for a in argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and re.search(message, err), err
