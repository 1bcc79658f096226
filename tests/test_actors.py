"""The sim actor: chunk contents against the sim, bootstrap values, episode statistics, faults."""

from __future__ import annotations

import copy

import pytest
import torch

from actors.sim_actor import SimActor
from agents import RandomAgent
from agents.registry import make_agent
from core.schema import RolloutSpec
from learner import ActionSpec, ActorCritic
from pipeline.transport.ring import RolloutRing
from rewards import make_reward
from sim import BatchedSim, ObsLayout, SimConfig

T, B = 12, 16


def make_actor(cfg: SimConfig, seed: int = 5, side: int = 0, **kwargs):
    torch.manual_seed(0)
    layout = ObsLayout.from_config(cfg)
    policy = ActorCritic(layout.size, ActionSpec.for_sim(cfg), hidden_sizes=(16,))
    opponent = make_agent("pursuit", B, layout, sim_config=cfg)
    reward = make_reward("outcome", "cpu", layout=layout)
    actor = SimActor(0, cfg, B, T, policy, opponent, reward, seed=seed, learning_side=side,
                     **kwargs)
    ring = RolloutRing(RolloutSpec(T, B, layout.size, 3), 2, debug=True)
    return actor, ring


def write_chunk(actor, ring):
    slot = ring.acquire_write(actor.actor_id)
    actor.rollout(slot)
    ring.commit(slot, actor.policy_version)  # debug ring: fails if any field was left unwritten
    (got,) = ring.acquire_read(1)
    return got


def test_chunk_replays_against_a_fresh_sim():
    """Feeding the recorded actions (and the scripted opponent) to a second sim with the same
    seed reproduces the recorded observations, outcome rewards and episode ends."""
    cfg = SimConfig(max_time_s=4.0)  # 8 decisions per episode: truncations inside the chunk
    actor, ring = make_actor(cfg)
    slot = write_chunk(actor, ring)
    sim = BatchedSim(B, cfg, seed=5)
    obs = sim.reset().clone()
    opponent = make_agent("pursuit", B, ObsLayout.from_config(cfg), sim_config=cfg)
    for t in range(T):
        assert torch.equal(slot.obs[t], obs[:, 0]), f"obs differ at step {t}"
        actions = torch.stack([slot.actions[t], opponent.act(obs[:, 1])], dim=1)
        out = sim.step(actions)
        assert torch.equal(slot.rewards[t], out.reward[:, 0].float())
        assert torch.equal(slot.terminated[t], out.terminated)
        assert torch.equal(slot.truncated[t], out.truncated)
        opponent.reset(out.done)
        obs = out.obs.clone()
    assert bool(slot.truncated.any()), "the short time limit should truncate some episodes"


def test_bootstrap_and_next_values():
    cfg = SimConfig(max_time_s=4.0)
    actor, ring = make_actor(cfg)
    slot = write_chunk(actor, ring)
    # Not truncated: no bootstrap value. Truncated: the value of a final observation (nonzero).
    assert bool((slot.bootstrap_values[~slot.truncated] == 0).all())
    assert bool((slot.bootstrap_values[slot.truncated] != 0).all())
    expected_next = actor.policy.get_value(actor._obs[:, 0])
    assert torch.allclose(slot.next_values, expected_next)
    # Behaviour log-probs and values are the policy's for the recorded actions.
    logp, _, value = actor.policy.evaluate(slot.obs.reshape(T * B, -1), slot.actions.reshape(T * B, 3))
    assert torch.allclose(slot.log_probs.reshape(-1), logp, atol=1e-5)
    assert torch.allclose(slot.values.reshape(-1), value, atol=1e-5)


def test_episode_statistics_match_the_chunk():
    cfg = SimConfig(max_time_s=4.0)
    actor, ring = make_actor(cfg)
    slot = write_chunk(actor, ring)
    wins, draws, losses, lengths = actor.stats.chunk_outcomes()
    done = slot.terminated | slot.truncated
    assert int(wins + draws + losses) == int(done.sum()) == lengths.numel()
    assert int(wins) == int((slot.rewards == 1).sum()) and int(losses) == int((slot.rewards == -1).sum())
    summary = actor.stats.summary()
    assert summary.episodes == int(done.sum()) and summary.length_sum == int(lengths.sum())


def test_blue_learning_side():
    cfg = SimConfig()
    actor, ring = make_actor(cfg, side=1)
    obs0 = actor._obs[:, 1].clone()
    slot = write_chunk(actor, ring)
    assert torch.equal(slot.obs[0], obs0)


def test_new_weights_picked_up_between_chunks():
    from pipeline.transport.weights import WeightPublisher

    cfg = SimConfig()
    actor, _ = make_actor(cfg)
    learner_policy = copy.deepcopy(actor.policy)
    pub = WeightPublisher(learner_policy)
    with torch.no_grad():
        for p in learner_policy.parameters():
            p.add_(0.5)
    pub.publish(learner_policy, 3)
    assert actor.sync_weights(pub) == 3
    assert all(torch.equal(a, b) for a, b in zip(actor.policy.parameters(), learner_policy.parameters(), strict=True))


class FailingOpponent(RandomAgent):
    """A plug-in opponent that raises on its ``fail_at``-th decision."""

    def __init__(self, num_envs: int, fail_at: int):
        super().__init__(num_envs)
        self.calls, self.fail_at = 0, fail_at

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError(f"opponent failed at decision {self.calls}")
        return super().act(obs)


def test_failure_mid_chunk_leaves_the_slot_to_abort():
    cfg = SimConfig()
    actor, ring = make_actor(cfg)
    actor.opponent = FailingOpponent(B, fail_at=T + T // 2)
    ring.release(write_chunk(actor, ring))
    slot = ring.acquire_write(0)
    with pytest.raises(RuntimeError, match=f"decision {T + T // 2}"):
        actor.rollout(slot)
    ring.abort(slot)
    s = ring.stats()
    assert s.aborted_chunks == 1 and s.produced_samples == s.consumed_samples + s.dropped_samples + s.in_flight_samples


def test_slot_shape_mismatch_is_refused():
    cfg = SimConfig()
    actor, _ = make_actor(cfg)
    ring = RolloutRing(RolloutSpec(T + 1, B, actor.obs_dim, 3), 1)
    with pytest.raises(ValueError, match="does not match actor 0"):
        actor.rollout(ring.acquire_write(0))


def test_sync_free_path_gives_the_cpu_samples():
    """The accelerator code path (sync-free sim, bootstrap value every step), run on the CPU,
    writes bit-identical chunks to the default CPU path, which reads the host to skip work."""
    cfg = SimConfig(max_time_s=4.0)  # truncations inside every chunk
    chunks = []
    for sync_free in (False, True):
        actor, ring = make_actor(cfg, sync_free=sync_free)
        assert actor.sync_free == sync_free and actor.sim.sync_free == sync_free
        torch.manual_seed(11)
        got = []
        for _ in range(2):
            slot = write_chunk(actor, ring)
            got.append({k: v.clone() for k, v in slot.tensors().items()})
            ring.release(slot)
        chunks.append(got)
    assert bool(chunks[0][0]["truncated"].any())
    for a, b in zip(*chunks, strict=True):
        for key in a:
            assert torch.equal(a[key], b[key]), key


# random: its generator breaks the graph
@pytest.mark.parametrize("opponent", ["crank", pytest.param("random", marks=pytest.mark.slow)])
def test_compiled_step_gives_the_eager_samples(opponent):
    """The whole decision step compiled as one function (CPU) writes the eager step's chunks:
    the same actions, observations, rewards and episode ends (truncations included, whose
    bootstrap values it computes every step); log-probabilities and values agree to float32
    rounding (the compiled MLP fuses its ops differently)."""
    cfg = SimConfig(max_time_s=4.0)
    layout = ObsLayout.from_config(cfg)
    torch.manual_seed(0)
    policy = ActorCritic(layout.size, ActionSpec.for_sim(cfg), hidden_sizes=(16,))
    chunks = []
    for compiled in (False, True):
        opp = make_agent(opponent, B, layout, sim_config=cfg, seed=3)
        actor = SimActor(0, cfg, B, T, policy, opp, make_reward("shaped", "cpu", layout=layout),
                         seed=5, compile_step=compiled)
        assert actor.uses_compiled_step == compiled
        ring = RolloutRing(RolloutSpec(T, B, layout.size, 3), 2, debug=True)
        got = []
        for _ in range(3):
            slot = write_chunk(actor, ring)
            got.append({k: v.clone() for k, v in slot.tensors().items()})
            ring.release(slot)
        got.append(actor.stats.counts.clone())
        chunks.append(got)
    assert bool(chunks[0][0]["truncated"].any()) and bool(chunks[0][0]["bootstrap_values"].ne(0).any())
    for a, b in zip(chunks[0][:-1], chunks[1][:-1], strict=True):
        for key in a:
            if key in ("log_probs", "values", "bootstrap_values", "next_values"):
                assert torch.allclose(a[key], b[key], atol=1e-5, rtol=1e-5), key
            else:
                assert torch.equal(a[key], b[key]), key
    assert torch.equal(chunks[0][-1], chunks[1][-1])  # the episode statistics


def test_compiled_step_is_for_the_cpu():
    cfg = SimConfig()
    layout = ObsLayout.from_config(cfg)
    policy = ActorCritic(layout.size, ActionSpec.for_sim(cfg), hidden_sizes=(16,)).to("meta")
    with pytest.raises(ValueError, match="compile_step is the CPU's"):
        SimActor(0, cfg, 8, 3, policy, make_agent("straight", 8, layout, "meta", sim_config=cfg),
                 make_reward("zero", "meta", layout=layout), device="meta", compile_step=True)


def test_samples_depend_on_the_actor_seed_alone():
    """The policy samples from the actor's own generator: the process-wide RNG (which other
    actors' threads draw from concurrently) does not change an actor's chunk."""
    cfg = SimConfig()
    chunks = []
    for global_seed in (1, 2):
        actor, ring = make_actor(cfg, seed=5)
        torch.manual_seed(global_seed)
        chunks.append(write_chunk(actor, ring).actions.clone())
    assert torch.equal(chunks[0], chunks[1])
    actor, ring = make_actor(cfg, seed=6)
    assert not torch.equal(chunks[0], write_chunk(actor, ring).actions)


ALL_OPPONENTS = ("random", "straight", "pursuit", "shooter", "crank")


@pytest.mark.parametrize("action_mode", ["discrete", "continuous"])
# Each reward kind stays in the fast tier (random: zero, pursuit: shaped, crank: outcome);
# straight and shooter, which repeat the outcome and zero rewards, are in the slow tier.
@pytest.mark.parametrize("opponent", [pytest.param(o, marks=pytest.mark.slow) if o in ("straight", "shooter")
                                      else o for o in ALL_OPPONENTS])
def test_accelerator_chunk_reads_no_device_data(action_mode, opponent):
    """A whole chunk on the meta device (shapes only: any host read of device data raises, and
    so does any tensor left on the CPU) runs the accelerator path end to end: policy sampling,
    opponent, sync-free sim with auto-reset, reward, statistics and the slot writes."""
    cfg = SimConfig(action_mode=action_mode)
    layout = ObsLayout.from_config(cfg)
    reward = ("zero", "outcome", "shaped")[ALL_OPPONENTS.index(opponent) % 3]
    policy = ActorCritic(layout.size, ActionSpec.for_sim(cfg), hidden_sizes=(16,)).to("meta")
    actor = SimActor(
        0, cfg, 8, 3, policy, make_agent(opponent, 8, layout, "meta", sim_config=cfg, action_mode=action_mode),
        make_reward(reward, "meta", layout=layout), device="meta", seed=5,
    )
    assert actor.sync_free and actor.sim.sync_free
    spec = RolloutSpec(3, 8, layout.size, 3, action_dtype=actor.spec.action_dtype)
    ring = RolloutRing(spec, 1, placement="device",
                       actor_device="meta", learner_device="meta")
    slot = ring.acquire_write(0)
    for _ in range(2):
        actor.rollout(slot)
    assert all(t.device.type == "meta" for t in slot.tensors().values())
    with pytest.raises((RuntimeError, NotImplementedError)):
        bool(slot.terminated.any())  # the check above has teeth: meta data cannot be read


def test_cuda_graph_needs_sync_free():
    cfg = SimConfig()
    with pytest.raises(ValueError, match="cuda_graph needs sync_free"):
        make_actor(cfg, sync_free=False, cuda_graph=True)


def _cuda_chunk(policy, cfg, opponent="pursuit", cuda_graph=False, placement="auto"):
    """One chunk of a fresh CUDA actor (seed 5) committed to a one-slot debug ring."""
    layout = ObsLayout.from_config(cfg)
    actor = SimActor(
        0, cfg, B, T, copy.deepcopy(policy), make_agent(opponent, B, layout, "cuda", sim_config=cfg),
        make_reward("outcome", "cuda", layout=layout), device="cuda", seed=5, cuda_graph=cuda_graph,
    )
    assert actor.uses_cuda_graph == cuda_graph
    ring = RolloutRing(RolloutSpec(T, B, layout.size, 3), 1, placement=placement,
                       actor_device="cuda", learner_device="cuda", debug=True)
    slot = ring.acquire_write(0)
    actor.rollout(slot)
    slot.written_event.synchronize()
    ring.commit(slot, 0)  # the debug check proves every field was written (to host memory too)
    return slot


def _cuda_policy(cfg):
    torch.manual_seed(0)
    layout = ObsLayout.from_config(cfg)
    return ActorCritic(layout.size, ActionSpec.for_sim(cfg), hidden_sizes=(16,)).cuda()


@pytest.mark.gpu
@pytest.mark.parametrize("opponent", ["pursuit", "random"])  # random: its own CUDA generator
def test_cuda_graph_gives_the_eager_samples(opponent):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cfg = SimConfig(max_time_s=4.0)
    policy = _cuda_policy(cfg)
    chunks = []
    for graph in (False, True):
        torch.manual_seed(123)
        torch.cuda.manual_seed(123)
        slot = _cuda_chunk(policy, cfg, opponent, cuda_graph=graph)
        chunks.append({k: v.clone() for k, v in slot.tensors().items()})
    for key in chunks[0]:
        a, b = chunks[0][key], chunks[1][key]
        assert torch.equal(a, b) if not a.is_floating_point() else torch.allclose(a, b, atol=1e-5), key


@pytest.mark.gpu
def test_pinned_ring_matches_device_ring():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cfg = SimConfig(max_time_s=4.0)
    policy = _cuda_policy(cfg)
    chunks = []
    for placement in ("device", "pinned"):
        torch.cuda.manual_seed(7)
        slot = _cuda_chunk(policy, cfg, placement=placement)
        chunks.append({k: v.cpu() for k, v in slot.tensors().items()})
    for key in chunks[0]:
        assert torch.equal(chunks[0][key], chunks[1][key]), key
