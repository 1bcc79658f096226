"""Policy-only files (learner/checkpoint/export.py): a checkpoint's policy without its optimizer
and RNG states, flown and evaluated like a checkpoint, refused for resuming, checked like one on
load."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from learner import ActionSpec, PPOConfig, PPOLearner
from learner.checkpoint import (
    CheckpointError,
    atomic_torch_save,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from learner.checkpoint.export import export_policy
from pipeline.config.specs import load_checkpoint_agent
from pipeline.evaluation.entrants import trained_sim_config
from sim.config import SimConfig
from sim.layout import ObsLayout

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = ObsLayout.from_config(SimConfig())


def make_learner(config: SimConfig) -> PPOLearner:
    """A tiny learner on ``config``'s observation layout."""
    layout = ObsLayout.from_config(config)
    return PPOLearner(PPOConfig(hidden_sizes=(8,)), layout.size, ActionSpec.for_sim(config),
                      obs_layout=layout.metadata())


def test_a_policy_only_file_flies_but_is_not_resumed(tmp_path) -> None:
    learner = make_learner(SimConfig())
    source = save_checkpoint(tmp_path / "checkpoints", learner, extra={"agent_steps": 64})
    out = export_policy(source, tmp_path / "policy.pt", note="a note")
    assert out.stat().st_size < source.stat().st_size  # the optimizer's moments stay behind
    state = read_checkpoint(out)
    assert state["kind"] == "policy" and state["obs_layout"] == LAYOUT.metadata()
    assert state["extra"] == {"agent_steps": 64, "config": {}, "note": "a note"}
    agent = load_checkpoint_agent(str(out), 2, LAYOUT, sim_config=SimConfig())
    for mine, saved in zip(agent.policy.state_dict().values(), learner.policy.state_dict().values(), strict=True):
        assert torch.equal(mine, saved)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(out, make_learner(SimConfig()))
    assert str(err.value) == (f"checkpoint {out} holds a policy only (no optimizer state): it can "
                              "fly and be evaluated, not be resumed")


def test_a_policy_only_file_keeps_the_simulator_it_was_trained_on(tmp_path) -> None:
    trained_on = SimConfig(time_scale=2.0)
    source = save_checkpoint(tmp_path / "checkpoints", make_learner(trained_on),
                             extra={"agent_steps": 8, "config": {"sim": dataclasses.asdict(trained_on)}})
    out = export_policy(source, tmp_path / "policy.pt")
    # pipeline.evaluate judges it on that simulator, as it would the checkpoint.
    assert trained_sim_config([str(out)]) == trained_sim_config([str(source)])
    assert trained_sim_config([str(out)]).time_scale == 2.0


def test_a_policy_only_file_of_another_layout_is_refused_in_one_line(tmp_path) -> None:
    source = save_checkpoint(tmp_path / "checkpoints", make_learner(SimConfig(obs_reach=True)))
    out = export_policy(source, tmp_path / "policy.pt")
    with pytest.raises(ValueError) as err:
        load_checkpoint_agent(str(out), 1, LAYOUT, sim_config=SimConfig())
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"checkpoint {out} was trained on another observation layout: ")


def test_a_damaged_or_incomplete_policy_file_is_refused_in_one_line(tmp_path) -> None:
    source = save_checkpoint(tmp_path / "checkpoints", make_learner(SimConfig()))
    out = export_policy(source, tmp_path / "policy.pt")
    data = out.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"^checkpoint .*cut\.pt is truncated or corrupt"):
        load_checkpoint_agent(str(cut), 1, LAYOUT)
    state = read_checkpoint(out)
    del state["model"]
    incomplete = atomic_torch_save(state, tmp_path / "incomplete.pt")
    with pytest.raises(CheckpointError) as err:
        load_checkpoint_agent(str(incomplete), 1, LAYOUT)
    assert str(err.value) == f"checkpoint {incomplete} is incomplete (missing: model)"
