"""Memory by stacked frames: ``SimConfig.obs_history`` past observations after the current one."""

from __future__ import annotations

import dataclasses

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


def test_the_layout_names_each_past_frame_after_the_current_one() -> None:
    bare = ObsLayout.from_config(SimConfig(obs_reach=True))
    layout = ObsLayout.from_config(SimConfig(obs_reach=True, obs_history=2))
    assert layout.frame_size == bare.size and layout.size == 3 * bare.size
    assert layout.names[: bare.size] == bare.names
    assert layout.names[bare.size] == "past[1].own.x" and layout.names[-1] == "past[2].reach.escape_margin"
    assert layout.index("past[2].enemy.range") == 2 * bare.size + bare.index("enemy.range")
    # The mirror image flips the same components in every frame.
    assert layout.mirror_signs == bare.mirror_signs * 3
    assert layout.mirror_signs[layout.index("past[1].own.y")] == -1.0


def test_a_layout_without_past_frames_is_a_prefix_of_one_with_them_and_nothing_else_is() -> None:
    meta = {k: ObsLayout.from_config(SimConfig(obs_history=k)).metadata() for k in (0, 1, 2)}
    frame = ObsLayout.from_config(SimConfig()).size
    assert ObsLayout.frames_prefix(meta[0], meta[2]) == frame
    assert ObsLayout.frames_prefix(meta[1], meta[2]) == 2 * frame
    assert ObsLayout.frames_prefix(meta[2], meta[0]) is None  # more frames than the sim keeps
    assert ObsLayout.frames_prefix(meta[1], meta[1]) is None  # equal: no prefix to take
    reach = ObsLayout.from_config(SimConfig(obs_reach=True, obs_history=1)).metadata()
    assert ObsLayout.frames_prefix(meta[0], reach) == frame  # the frame before the reach block
    assert ObsLayout.frames_prefix(meta[1], reach) is None  # a past frame without the block is not one with it
    assert ObsLayout.frames_prefix(reach, meta[2]) is None  # trained with the block: a sim without it
    scaled = {**meta[0], "scales": {**meta[0]["scales"], "range_m": 1.0}}
    assert ObsLayout.frames_prefix(scaled, meta[1]) is None


@pytest.mark.parametrize("value", [-1, 9, True, 1.0])
def test_a_bad_number_of_past_frames_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(ValueError, match="obs_history must be an integer in \\[0, 8\\]"):
        SimConfig(obs_history=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["torch", "native"])
@pytest.mark.parametrize("sync_free", [False, True])
def test_the_stacked_observations_are_the_past_frames_of_the_same_fights(backend: str, sync_free: bool) -> None:
    """The sim with two past frames against the same fights without them: every observation
    is the current frame, then the two before it, and a new episode starts with every frame its
    first; the final observations of an ended episode keep its own past."""
    n, k = 48, 2
    sim = BatchedSim(n, SHORT.replace(obs_history=k), seed=3, backend=backend, sync_free=sync_free)
    bare = BatchedSim(n, SHORT, seed=3, backend=backend, sync_free=sync_free)
    assert sim.obs_dim == (1 + k) * bare.obs_dim
    frame = bare.reset().clone()
    assert torch.equal(sim.reset(), frame.repeat(1, 1, 1 + k))
    past = [frame.clone() for _ in range(k)]
    generator = torch.Generator().manual_seed(0)
    ended = 0
    for _ in range(100):
        actions = random_actions(generator, n)
        out, ref = sim.step(actions), bare.step(actions)
        assert torch.equal(out.final_obs, torch.cat([ref.final_obs, frame, *past[:-1]], -1))
        done = ref.done.view(n, 1, 1)
        past = [torch.where(done, ref.obs, p) for p in [frame, *past[:-1]]]
        frame = ref.obs.clone()
        assert torch.equal(out.obs, torch.cat([frame, *past], -1))
        assert torch.equal(out.reward, ref.reward) and torch.equal(out.done, ref.done)
        ended += int(ref.done.sum())
    assert ended > n  # every environment restarted at least once on average


@pytest.mark.parametrize("memory", [{"obs_history": 1}, {"obs_trace_s": 10.0}], ids=["past-frame", "trace"])
def test_a_masked_reset_leaves_the_other_environments_and_their_past_alone(memory: dict) -> None:
    """A reset environment's past frames, or its trace (tests/test_obs_trace.py), start again
    at its new first frame; the others keep theirs."""
    sim = BatchedSim(8, SHORT.replace(**memory), seed=1)
    sim.reset()
    generator = torch.Generator().manual_seed(2)
    for _ in range(3):
        sim.step(random_actions(generator, 8))
    before = sim.result.obs.clone()
    mask = torch.zeros(8, dtype=torch.bool)
    mask[2] = True
    after = sim.reset(mask)
    size = sim.layout.frame_size
    assert torch.equal(after[~mask], before[~mask])
    assert torch.equal(after[2, :, size:], after[2, :, :size])  # its past is its new first frame
    assert not torch.equal(after[2], before[2])


def test_a_network_without_memory_flies_on_the_current_frame_of_a_sim_with_it(tmp_path) -> None:
    bare_config, config = SimConfig(), SimConfig(obs_history=2)
    learner = make_learner(bare_config)
    path = save_checkpoint(tmp_path / "checkpoints", learner)
    layout = ObsLayout.from_config(config)
    agent = load_checkpoint_agent(str(path), 16, layout, sim_config=config, deterministic=True)
    plain = load_checkpoint_agent(str(path), 16, ObsLayout.from_config(bare_config), sim_config=bare_config,
                                  deterministic=True)
    obs = BatchedSim(16, config, seed=5).reset()[:, 0]
    stacked = obs.clone()
    stacked[:, layout.frame_size:] = torch.randn(16, layout.size - layout.frame_size)  # any past
    assert torch.equal(agent.act(stacked), plain.act(obs[:, : layout.frame_size].contiguous()))
    with pytest.raises(ValueError, match=r"obs must have shape \(16, 243\)"):
        agent.act(obs[:, : layout.frame_size])


def test_a_network_with_memory_is_refused_by_a_sim_without_it_in_one_line(tmp_path) -> None:
    path = save_checkpoint(tmp_path / "checkpoints", make_learner(SimConfig(obs_history=1)))
    with pytest.raises(ValueError) as err:
        load_checkpoint_agent(str(path), 1, ObsLayout.from_config(SimConfig()), sim_config=SimConfig())
    assert "\n" not in str(err.value)
    assert "was trained on another observation layout" in str(err.value) and "missing now: past[1]" in str(err.value)


def test_checkpoints_with_and_without_memory_meet_in_the_sim_with_the_most_frames(tmp_path) -> None:
    paths = []
    for k in (0, 2, 1):
        config = SimConfig(obs_history=k)
        paths.append(str(save_checkpoint(tmp_path / f"run{k}" / "checkpoints", make_learner(config),
                                         extra={"config": {"sim": dataclasses.asdict(config)}})))
    assert trained_sim_config(paths).obs_history == 2
    assert trained_sim_config([paths[0], "crank"]).obs_history == 0
    reach = SimConfig(obs_reach=True, obs_history=1)
    other = save_checkpoint(tmp_path / "reach" / "checkpoints", make_learner(reach),
                            extra={"config": {"sim": dataclasses.asdict(reach)}})
    met = trained_sim_config([paths[0], str(other)])  # the one without memory reads the frame before the block
    assert met.obs_reach and met.obs_history == 1


def test_the_reference_sim_refuses_past_frames() -> None:
    with pytest.raises(ValueError, match="obs_history must be 0"):
        ReferenceSim(SimConfig(obs_history=1))
