"""The arena's mirror image (``ppo.mirror``): the sim is symmetric under it with the
observation signs and action map the policy uses, and a mirrored network acts in the mirrored
fight as the mirror image of how it acts in the fight, whatever its weights."""

from __future__ import annotations

import pytest
import torch

from learner import ActionSpec, ActorCritic, PPOConfig, PPOLearner
from learner.checkpoint import load_policy, save_checkpoint
from pipeline.run.sim_actors import sim_mirror
from sim import BatchedSim, SimConfig
from sim.layout import ObsLayout

MIRRORED_STATE = ("f_py", "f_vy", "f_rudder", "m_py", "m_vy", "m_rudder")
"""What the world's y → −y changes in the sim's state: the y coordinates and the rudders."""


@pytest.mark.parametrize("backend", ["torch", "native"])
def test_the_mirrored_fight_observes_the_mirror_image_of_the_fight(backend: str) -> None:
    config = SimConfig(dtype="float64")
    fight = BatchedSim(32, config=config, seed=3, backend=backend)
    mirrored = BatchedSim(32, config=config, seed=3, backend=backend)
    fight.reset()
    mirrored.reset()
    for name in MIRRORED_STATE:
        getattr(mirrored.state, name).neg_()
    signs = torch.tensor(fight.layout.mirror_signs, dtype=torch.float64)
    gen = torch.Generator().manual_seed(7)
    first_episode = torch.ones(32, dtype=torch.bool)
    compared = launches = 0
    for _ in range(300):
        actions = torch.stack([torch.randint(0, 3, (32, 2), generator=gen),
                               torch.randint(0, 3, (32, 2), generator=gen),
                               (torch.rand(32, 2, generator=gen) < 0.08).long()], dim=-1)
        flipped = actions.clone()
        flipped[..., 0] = 2 - actions[..., 0]  # the rudder reverses
        a = fight.step(actions)
        a_obs, a_reward, a_winner = a.final_obs.clone(), a.reward.clone(), a.winner.clone()
        launches += int(a.launches.sum())
        b = mirrored.step(flipped)
        keep = first_episode  # a new episode starts from the same (unmirrored) conditions in both
        torch.testing.assert_close(b.final_obs[keep], a_obs[keep] * signs, atol=1e-7, rtol=0)
        torch.testing.assert_close(b.reward[keep], a_reward[keep])
        assert torch.equal(b.winner[keep], a_winner[keep])
        compared += int(keep.sum())
        first_episode &= ~a.done
        if not first_episode.any():
            break
    assert compared > 32 * 50 and launches > 20  # long fights, missiles in the air


@pytest.mark.parametrize("mode", ["discrete", "continuous"])
def test_a_mirrored_network_is_equivariant_whatever_its_weights(mode: str) -> None:
    sim = SimConfig(action_mode=mode)
    spec = ActionSpec.for_sim(sim)
    maps = sim_mirror(sim)
    torch.manual_seed(0)
    net = ActorCritic(ObsLayout.from_config(sim).size, spec, (32, 32), mirror=maps)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p))  # far from the initialization's small policy head
        net.obs_norm.update(torch.randn(500, net.obs_dim) * 3 + 1)
    obs = torch.randn(64, net.obs_dim) * 2
    mirror_obs = obs * torch.tensor(maps["obs_sign"])
    head, value = net(obs)
    m_head, m_value = net(mirror_obs)
    perm, sign = torch.tensor(maps["perm"]), torch.tensor(maps["sign"])
    torch.testing.assert_close(m_head, head[:, perm] * sign)
    torch.testing.assert_close(m_value, value)
    torch.testing.assert_close(net.get_value(mirror_obs), value)
    actions, log_prob, _ = net.act(obs, deterministic=True)
    m_actions, m_log_prob, _ = net.act(mirror_obs, deterministic=True)
    if mode == "discrete":
        assert torch.equal(m_actions[:, 0], 2 - actions[:, 0])
        assert torch.equal(m_actions[:, 1:], actions[:, 1:])
        flipped = actions.clone()
        flipped[:, 0] = 2 - actions[:, 0]
    else:
        flipped = actions * torch.tensor([-1.0, 1.0, 1.0])
        torch.testing.assert_close(m_actions, flipped)
    torch.testing.assert_close(m_log_prob, log_prob)
    lp, ent, val = net.evaluate(obs, actions)
    m_lp, m_ent, m_val = net.evaluate(mirror_obs, flipped)
    torch.testing.assert_close(m_lp, lp)
    torch.testing.assert_close(m_ent, ent)
    torch.testing.assert_close(m_val, val)
    # Without the mirror the same weights are not equivariant: the test above could fail.
    plain = ActorCritic(net.obs_dim, spec, (32, 32))
    plain.load_state_dict(net.state_dict())
    p_head, _ = plain(obs)
    pm_head, _ = plain(mirror_obs)
    assert (pm_head - p_head[:, perm] * sign).abs().max() > 0.1


def test_the_mirror_travels_with_the_checkpoint(tmp_path) -> None:
    sim = SimConfig()
    layout = ObsLayout.from_config(sim)
    learner = PPOLearner(PPOConfig(hidden_sizes=(16,), mirror=True), layout.size, ActionSpec.for_sim(sim),
                         obs_layout=layout.metadata(), mirror=sim_mirror(sim))
    save_checkpoint(tmp_path, learner, {"agent_steps": 1})
    loaded = load_policy(tmp_path)
    assert loaded.mirror == learner.policy.mirror
    obs = torch.randn(8, layout.size)
    torch.testing.assert_close(loaded(obs), learner.policy(obs))


def test_bad_mirrors_are_refused() -> None:
    sim = SimConfig()
    spec = ActionSpec.for_sim(sim)
    maps = sim_mirror(sim)
    with pytest.raises(ValueError, match="needs the env's mirror image"):
        PPOLearner(PPOConfig(mirror=True), 81, spec)
    for bad, match in (
        ({**maps, "obs_sign": maps["obs_sign"][:-1]}, "obs_sign"),
        ({**maps, "obs_sign": [0.5] * 81}, "obs_sign"),
        ({**maps, "perm": [1, 2, 0, 3, 4, 5, 6, 7]}, "not its own inverse"),
        ({**maps, "perm": [0, 0, 1, 3, 4, 5, 6, 7]}, "permutation"),
        ({**maps, "sign": [1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0, 1.0]}, "not its own inverse"),
        ({"obs_sign": maps["obs_sign"]}, "keys"),
    ):
        with pytest.raises(ValueError, match=match):
            ActorCritic(81, spec, (8,), mirror=bad)
