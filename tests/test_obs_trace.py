"""Memory by a trace: ``SimConfig.obs_trace_s``, an exponential moving average of the frames so far."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from learner.checkpoint import save_checkpoint
from pipeline.config.specs import load_checkpoint_agent
from pipeline.evaluation.entrants import trained_sim_config
from sim.batched import BatchedSim
from sim.config import SimConfig
from sim.layout import ObsLayout
from sim.reference.scalar import ReferenceSim
from tests.memory_helpers import SHORT, make_learner, random_actions


def test_the_layout_names_the_trace_after_the_past_frames_and_saves_its_time_constant() -> None:
    bare = ObsLayout.from_config(SimConfig(obs_reach=True))
    layout = ObsLayout.from_config(SimConfig(obs_reach=True, obs_history=1, obs_trace_s=20.0))
    assert layout.frames == 3 and layout.size == 3 * bare.size and layout.frame_size == bare.size
    assert layout.names[bare.size] == "past[1].own.x"
    assert layout.names[2 * bare.size] == "trace.own.x" and layout.names[-1] == "trace.reach.escape_margin"
    assert layout.mirror_signs == bare.mirror_signs * 3
    assert layout.mirror_signs[layout.index("trace.enemy.bearing_sin")] == -1.0
    assert layout.metadata()["scales"]["trace_s"] == 20.0
    assert "trace_s" not in bare.metadata()["scales"]


def test_a_layout_without_memory_is_a_prefix_of_one_with_a_trace_and_a_trace_needs_its_time_constant() -> None:
    bare = ObsLayout.from_config(SimConfig()).metadata()
    trace = ObsLayout.from_config(SimConfig(obs_trace_s=20.0)).metadata()
    both = ObsLayout.from_config(SimConfig(obs_history=1, obs_trace_s=20.0)).metadata()
    past = ObsLayout.from_config(SimConfig(obs_history=1)).metadata()
    other = ObsLayout.from_config(SimConfig(obs_trace_s=40.0)).metadata()
    frame = bare["size"]
    assert ObsLayout.frames_prefix(bare, trace) == frame
    assert ObsLayout.frames_prefix(bare, both) == frame
    assert ObsLayout.frames_prefix(past, both) == 2 * frame  # the past frame, then a trace it ignores
    assert ObsLayout.frames_prefix(trace, bare) is None  # a network with a trace in a sim without
    assert ObsLayout.frames_prefix(trace, other) is None  # another time constant
    assert ObsLayout.frames_prefix(trace, both) is None  # the trace would read the past frame


@pytest.mark.parametrize("value", [-1.0, 4000.0, float("nan")])
def test_a_bad_time_constant_is_refused_naming_the_field(value: float) -> None:
    with pytest.raises(ValueError, match="obs_trace_s"):
        SimConfig(obs_trace_s=value)


@pytest.mark.parametrize("backend", ["torch", "native"])
@pytest.mark.parametrize("sync_free", [False, True])
def test_the_trace_is_the_moving_average_of_the_same_fights_frames(backend: str, sync_free: bool) -> None:
    """The sim with a trace against the same fights without it: every observation is the
    current frame, then ``a·m + (1 − a)·frame`` of the trace before it, and a new episode starts
    with the trace at its first frame; the final observations of an ended episode keep its own
    trace, moved once more towards its final frame."""
    n, tau = 48, 5.0
    config = SHORT.replace(obs_trace_s=tau)
    a = math.exp(-config.decision_dt_s / tau)
    sim = BatchedSim(n, config, seed=3, backend=backend, sync_free=sync_free)
    bare = BatchedSim(n, SHORT, seed=3, backend=backend, sync_free=sync_free)
    assert sim.obs_dim == 2 * bare.obs_dim
    frame = bare.reset().clone()
    assert torch.equal(sim.reset(), frame.repeat(1, 1, 2))
    trace = frame.clone()
    generator = torch.Generator().manual_seed(0)
    ended = 0
    moved = 0.0
    for _ in range(100):
        actions = random_actions(generator, n)
        out, ref = sim.step(actions), bare.step(actions)
        final_trace = trace * a + ref.final_obs * (1 - a)
        torch.testing.assert_close(out.final_obs, torch.cat([ref.final_obs, final_trace], -1))
        done = ref.done.view(n, 1, 1)
        trace = torch.where(done, ref.obs, final_trace)
        torch.testing.assert_close(out.obs, torch.cat([ref.obs, trace], -1))
        assert torch.equal(out.obs[..., : bare.obs_dim], ref.obs)
        assert torch.equal(out.reward, ref.reward) and torch.equal(out.done, ref.done)
        moved = max(moved, float((trace - ref.obs).abs().max()))
        ended += int(ref.done.sum())
    assert ended > n  # every environment restarted at least once on average
    assert moved > 0.1  # the trace lags the frame: it is not a copy of it


def test_a_network_without_a_trace_flies_on_the_current_frame_of_a_sim_with_one(tmp_path) -> None:
    bare_config, config = SimConfig(), SimConfig(obs_trace_s=30.0)
    path = save_checkpoint(tmp_path / "checkpoints", make_learner(bare_config))
    layout = ObsLayout.from_config(config)
    agent = load_checkpoint_agent(str(path), 16, layout, sim_config=config, deterministic=True)
    plain = load_checkpoint_agent(str(path), 16, ObsLayout.from_config(bare_config), sim_config=bare_config,
                                  deterministic=True)
    obs = BatchedSim(16, config, seed=5).reset()[:, 0].clone()
    obs[:, layout.frame_size:] = torch.randn(16, layout.size - layout.frame_size)  # any trace
    assert torch.equal(agent.act(obs), plain.act(obs[:, : layout.frame_size].contiguous()))


def test_a_network_with_a_trace_is_refused_by_a_sim_with_another_in_one_line(tmp_path) -> None:
    path = save_checkpoint(tmp_path / "checkpoints", make_learner(SimConfig(obs_trace_s=30.0)))
    for other in (SimConfig(), SimConfig(obs_trace_s=10.0)):
        with pytest.raises(ValueError) as err:
            load_checkpoint_agent(str(path), 1, ObsLayout.from_config(other), sim_config=other)
        assert "\n" not in str(err.value)
        assert "was trained on another observation layout" in str(err.value)


def test_checkpoints_with_and_without_a_trace_meet_in_the_sim_with_it(tmp_path) -> None:
    paths = []
    for name, config in (("bare", SimConfig()), ("trace", SimConfig(obs_trace_s=30.0)),
                         ("other", SimConfig(obs_trace_s=10.0))):
        paths.append(str(save_checkpoint(tmp_path / name / "checkpoints", make_learner(config),
                                         extra={"config": {"sim": dataclasses.asdict(config)}})))
    assert trained_sim_config(paths[:2]).obs_trace_s == 30.0
    assert trained_sim_config([paths[0], "crank"]).obs_trace_s == 0.0
    with pytest.raises(ValueError, match=r"obs_trace_s: 30\.0 != 10\.0"):
        trained_sim_config(paths)


def test_the_reference_sim_refuses_a_trace() -> None:
    with pytest.raises(ValueError, match="obs_trace_s must be 0"):
        ReferenceSim(SimConfig(obs_trace_s=5.0))
