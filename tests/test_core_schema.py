"""The rollout schema is the one declaration: every consumer's fields are the schema's, and a
field added to it flows through a whole run with no other edit."""

from __future__ import annotations

import asyncio

import pytest
import torch

import core.schema
from core.schema import ROLLOUT_FIELDS, RolloutField, RolloutSpec
from learner import PPOLearner, RolloutBatch
from monitoring import Metrics
from pipeline.config import resolve
from pipeline.config.flags import parse_config
from pipeline.launch import run
from pipeline.run.intake import BatchIntake
from pipeline.run.parts import build

ARGV = ["--actor-processes", "off", "--actors", "2", "--envs-per-actor", "8", "--rollout-len", "4", "--opponent", "random",
        "--reward", "outcome", "--device", "cpu", "--display", "none", "--metrics-port", "-1",
        "--set", "run.eval_episodes=0", "--set", "ppo.hidden_sizes=[8]", "--set", "ppo.update_epochs=1"]


def names(fields) -> list[str]:
    return [f.name for f in fields]


def test_every_consumer_holds_exactly_the_schema_fields(tmp_path):
    schema = names(ROLLOUT_FIELDS)
    step = names(f for f in ROLLOUT_FIELDS if f.per_step)
    parts = build(resolve(parse_config([*ARGV, "--run-dir", str(tmp_path), "--total-steps", "64",
                                        "--slots-per-batch", "2"])))
    slot = parts.ring.slots[0]
    assert list(slot.names()) == schema
    actor = parts.actors[0]
    assert names(actor.spec.fields) == schema
    assert list(slot.row(0)) == step  # an actor's step targets
    assert list(actor.spec.allocate_step()) == step  # CUDA-graph static buffers
    assert list(actor.spec.allocate().names()) == schema  # a staging twin
    intake = BatchIntake(parts, Metrics())
    for k in range(2):
        s = parts.ring.acquire_write(k)
        actor.rollout(s)
        parts.ring.commit(s, 0)
    batch = intake.assemble(asyncio.run(intake.collect()))
    assert list(batch.names()) == schema
    batch.validate(obs_dim=parts.layout.size, action_dim=3)
    # The debug fill and its check cover every field, and the byte count every field's bytes.
    slot.fill_magic()
    assert slot.unwritten_fields() == schema
    field_bytes = sum(t.numel() * t.element_size() for t in slot.tensors().values())
    assert field_bytes <= slot.nbytes() < field_bytes + 64 * len(schema)
    # A batch missing a field, or carrying one the schema lacks, is refused by name.
    tensors = batch.tensors()
    del tensors["rewards"]
    with pytest.raises(ValueError, match=r"missing \['rewards'\]"):
        RolloutBatch(batch.policy_versions, **tensors).validate()


def test_each_field_is_one_view_into_one_block():
    spec = RolloutSpec(3, 5, 7, 2)
    chunk = spec.allocate()
    assert chunk.block is not None and chunk.block.dtype == torch.uint8
    for name, t in chunk.tensors().items():
        assert t.untyped_storage().data_ptr() == chunk.block.untyped_storage().data_ptr(), name
        assert (t.data_ptr() - chunk.block.data_ptr()) % core.schema.ALIGN_BYTES == 0, name
        t.view(torch.uint8).fill_(0)
    assert chunk.terminated.dtype == torch.bool and chunk.actions.shape == (3, 5, 2)
    other = spec.allocate()
    other.obs.fill_(1.5)
    chunk.copy_(other)  # one block copy
    assert torch.equal(chunk.obs, other.obs)


def test_a_field_added_to_the_schema_flows_through_a_whole_run(tmp_path, monkeypatch):
    """Two new fields (the sim's winner, the opponent's action) are declared in the schema and
    nothing else is edited: slots, the debug check (every field written by every chunk), the
    batch and the learner's update all carry them."""
    extra = (RolloutField("winner", "int", source="result.winner", doc="-1 running, 0/1 side, 2 draw"),
             RolloutField("opponent_actions", "action", ("action_dim",), source="opponent_actions"))
    monkeypatch.setattr(core.schema, "ROLLOUT_FIELDS", ROLLOUT_FIELDS + extra)
    seen: list[dict[str, torch.Tensor]] = []
    update = PPOLearner.update

    def recording_update(self, batch):
        seen.append({k: v.clone() for k, v in batch.tensors().items()})
        return update(self, batch)

    monkeypatch.setattr(PPOLearner, "update", recording_update)
    config = resolve(parse_config([*ARGV, "--run-dir", str(tmp_path / "run"), "--total-steps",
                                   str(16 * 32), "--sync", "--debug", "--set", "sim.max_time_s=2.0"]))
    result = run(config)
    assert result.exit_code == 0 and result.ring.consumed_chunks == 16
    assert seen and all({"winner", "opponent_actions"} <= set(b) for b in seen)
    winner = torch.cat([b["winner"].flatten() for b in seen])
    ended = torch.cat([(b["terminated"] | b["truncated"]).flatten() for b in seen])
    assert bool(ended.any()) and bool((~ended).any())
    assert set(winner[ended].tolist()) <= {0, 1, 2} and set(winner[~ended].tolist()) == {-1}
    opp = torch.cat([b["opponent_actions"].reshape(-1, 3) for b in seen])
    assert opp.dtype == torch.int64 and int(opp.min()) >= 0 and opp.shape[0] == 16 * 32
