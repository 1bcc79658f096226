"""Host traffic on the accelerator path, found on the CPU: the ``meta`` device stands in for the
GPU and :class:`sim.device.HostTraffic` records every read of device data on the host and every
copy of host data to the device. On a GPU each one is a host sync per call, and CUDA graph
capture refuses the copies (an H100 run found two such copies in the scripted opponents: an
index list in ``most_urgent_missile`` and numbers made tensors with ``torch.as_tensor``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from actors.sim_actor import SimActor
from agents.grouped import GroupedOpponent
from agents.policy import PolicyAgent
from agents.registry import AGENT_NAMES
from agents.scripted import columns
from agents.tactics import PREFIX, TACTICS
from core.schema import RolloutSpec
from learner import ActionSpec, ActorCritic
from pipeline.config import resolve
from pipeline.config.flags import parse_config
from pipeline.config.specs import build_agent, make_reward
from pipeline.evaluation.entrants import trained_sim_config
from pipeline.transport.ring import RolloutRing
from sim import BatchedSim, ObsLayout, SimConfig
from sim.device import HostTraffic

META = torch.device("meta")
CFG = SimConfig()
LAYOUT = ObsLayout.from_config(CFG)


def _traffic(fn, reads_raise: bool = False) -> list[str]:
    """The events ``fn()`` records. ``reads_raise``: ``fn`` reads device data, which on meta
    raises after it was recorded; otherwise any error propagates (a clean run must run)."""
    with HostTraffic() as traffic:
        try:
            fn()
        except (RuntimeError, NotImplementedError):
            if not reads_raise:
                raise
    return traffic.events


X = torch.zeros(4, 10, device=META)


@pytest.mark.parametrize("snippet, what", [
    (lambda: X.sum().item(), "reads device data on the host"),
    (lambda: bool(X.any()), "reads device data on the host"),
    (lambda: X[X > 0], "boolean mask"),
    (lambda: X.nonzero(), "reads device data on the host"),
    (lambda: X[:, [1, 2, 3]], "indexes a device tensor with host data"),
    (lambda: X[:, torch.tensor([1, 2])], "indexes a device tensor with host data"),
    (lambda: torch.as_tensor(0.5, dtype=torch.float32, device=META), "builds a device tensor from host data"),
    (lambda: torch.tensor([1.0, 2.0], device=META), "builds a device tensor from host data"),
    (lambda: torch.ones(3).to(META), "copies a host tensor to the device"),
    (lambda: X.clone().copy_(torch.ones(4, 10)), "copies a host tensor to the device"),
])
def test_each_kind_of_host_traffic_is_recorded_with_its_line(snippet, what):
    events = _traffic(snippet, reads_raise=True)
    assert events and what in events[0], events
    assert "test_host_traffic.py" in events[0]


def test_device_side_work_is_no_traffic():
    def work():
        view = X[:, 1:7:2]
        y = view * X.new_full((), 2.0) + torch.where(view > 0, view, 0.0)
        y.index_select(1, torch.zeros(2, dtype=torch.int64, device=META)).argmin(-1)
        X * torch.tensor(2.0)  # a 0-dim host tensor is a scalar argument, not a copy
    assert _traffic(work) == []


def test_columns_is_a_view_when_the_indices_are_evenly_spaced():
    obs = torch.arange(40.0).view(4, 10)
    for idx in ([3], [1, 4, 7], [0, 1, 2], [2, 5, 6]):
        assert torch.equal(columns(obs, idx), obs[:, idx])
    assert columns(obs, [1, 4, 7]).untyped_storage().data_ptr() == obs.untyped_storage().data_ptr()
    assert _traffic(lambda: columns(X, [1, 4, 7])) == []
    with pytest.raises(ValueError, match="at least one index"):
        columns(obs, [])


AGENTS = [*AGENT_NAMES, *(f"{PREFIX}{t}" for t in TACTICS)]


@pytest.mark.parametrize("name", AGENTS)
def test_every_agent_acts_on_the_device_without_host_traffic(name):
    cfg = trained_sim_config([name])  # a champion's own (ace3 reads the reach block and a trace), else the default
    layout = ObsLayout.from_config(cfg)
    agent = build_agent(name, 8, layout, META, sim_config=cfg)
    obs = torch.zeros(8, layout.size, device=META)
    agent.act(obs)  # the first call may move tables
    assert _traffic(lambda: agent.act(obs)) == []


def test_the_default_runs_actor_chunk_has_no_host_traffic():
    """The launcher's default opponents (the league's anchors and a policy, chosen on the
    device) and its default reward, whole chunks of the sync-free actor: what a GPU actor
    captures in one CUDA graph."""
    default = resolve(parse_config([]))
    spec = ActionSpec.for_sim(CFG)

    def net():
        return ActorCritic(LAYOUT.size, spec, hidden_sizes=(16,)).to(META)

    groups = [{**{a: build_agent(a, 4, LAYOUT, META, sim_config=CFG) for a in default.league.anchors},
               "ace": build_agent("ace", 4, LAYOUT, META, sim_config=CFG),
               "policy": PolicyAgent(net(), 4)} for _ in range(2)]
    opponent = GroupedOpponent(groups, select_on_device=True)
    reward = make_reward(default.actors.reward, META, LAYOUT, CFG)
    actor = SimActor(0, CFG, 8, 3, net(), opponent, reward, device=META, seed=5)
    assert actor.sync_free
    ring = RolloutRing(RolloutSpec(3, 8, LAYOUT.size, 3, action_dtype=actor.spec.action_dtype), 1,
                       placement="device", actor_device=META, learner_device=META)
    slot = ring.acquire_write(0)
    actor.rollout(slot)
    opponent.assign(1, "crank")
    assert _traffic(lambda: actor.rollout(slot)) == []


@pytest.mark.parametrize("opponent", [f"{PREFIX}herd", f"{PREFIX}drag?heldout", f"{PREFIX}skate?heldout"])
def test_a_tactic_opponents_chunk_has_no_host_traffic(opponent):
    """A tactic draws its parameters per episode on the device (the held-out ranges too)."""
    spec = ActionSpec.for_sim(CFG)
    tactic = build_agent(opponent, 8, LAYOUT, META, sim_config=CFG)
    actor = SimActor(0, CFG, 8, 3, ActorCritic(LAYOUT.size, spec, hidden_sizes=(16,)).to(META), tactic,
                     make_reward("shaped+0.75*hunt", META, LAYOUT, CFG), device=META, seed=5)
    ring = RolloutRing(RolloutSpec(3, 8, LAYOUT.size, 3, action_dtype=actor.spec.action_dtype), 1,
                       placement="device", actor_device=META, learner_device=META)
    slot = ring.acquire_write(0)
    actor.rollout(slot)
    assert _traffic(lambda: actor.rollout(slot)) == []


@pytest.mark.parametrize("curricula", [{}, {"spawn_wide": 0.3}])
def test_the_training_starts_reset_without_host_traffic(curricula):
    """The default run's training sim (its curriculum of endgames) and the wide starts: the
    sync-free sim's masked resets draw every start on the device."""
    config = dataclasses.replace(resolve(parse_config([])).sim, **curricula)
    assert config.spawn_partial_ammo > 0
    sim = BatchedSim(8, config, device=META, sync_free=True)
    sim.reset()
    actions = torch.zeros(8, 2, 3, dtype=torch.int64, device=META)
    sim.step(actions)
    assert _traffic(lambda: (sim.step(actions), sim.reset(torch.ones(8, dtype=torch.bool, device=META)))) == []


@pytest.mark.parametrize("memory", [{"obs_history": 2}, {"obs_history": 1, "obs_trace_s": 20.0}],
                         ids=["past-frames", "past-frame-and-trace"])
def test_a_chunk_with_past_frames_and_a_network_without_them_has_no_host_traffic(memory):
    """Stacked frames (``sim.obs_history``) and the trace (``sim.obs_trace_s``) are masked
    device writes; ``ace``, trained without them, reads the current frame as a view of the
    stacked observations."""
    config = dataclasses.replace(CFG, **memory)
    layout = ObsLayout.from_config(config)
    spec = ActionSpec.for_sim(config)
    ace = build_agent("ace", 8, layout, META, sim_config=config)
    actor = SimActor(0, config, 8, 3, ActorCritic(layout.size, spec, hidden_sizes=(16,)).to(META), ace,
                     make_reward("shaped", META, layout, config), device=META, seed=5)
    assert actor.sync_free and actor.obs_dim == 3 * LAYOUT.size
    ring = RolloutRing(RolloutSpec(3, 8, layout.size, 3, action_dtype=actor.spec.action_dtype), 1,
                       placement="device", actor_device=META, learner_device=META)
    slot = ring.acquire_write(0)
    actor.rollout(slot)
    assert _traffic(lambda: actor.rollout(slot)) == []
