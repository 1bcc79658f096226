"""Agents: the batch contract, random and policy agents, the registry, and each scripted rule on
hand-built observations."""

from __future__ import annotations

import math

import pytest
import torch

from agents import (
    BaseAgent,
    CrankAgent,
    PolicyAgent,
    PursuitAgent,
    RandomAgent,
    ShooterAgent,
    StraightAgent,
    make_agent,
)
from learner import ActionSpec, ActorCritic
from pipeline.run.sim_actors import sim_mirror
from sim import SimConfig
from sim.autopilot import pursuit_actions
from sim.layout import (
    CLOSING_SCALE_MPS,
    MISSILE_SPEED_SCALE_MPS,
    RANGE_SCALE_M,
    SPEED_SCALE_MPS,
    ObsLayout,
)

LAYOUT = ObsLayout.from_config(SimConfig())


def make_obs(n: int = 1, **fields: float | list[float]) -> torch.Tensor:
    """Observations ``[n, D]``: a ready fighter at 300 m/s facing an enemy 20 km dead ahead,
    nose-on at 300 m/s; keyword ``enemy__range=0.5`` sets ``enemy.range``."""
    base = {
        "own.speed": 300 / SPEED_SCALE_MPS, "own.missiles_left": 1.0, "own.fire_ready": 1.0,
        "own.alive": 1.0, "own.heading_cos": 1.0, "own.throttle": 1.0,
        "enemy.alive": 1.0, "enemy.range": 20_000 / RANGE_SCALE_M, "enemy.bearing_cos": 1.0,
        "enemy.rel_heading_cos": -1.0, "enemy.speed": 300 / SPEED_SCALE_MPS,
        "enemy.missiles_left": 1.0, "enemy.nose_on_cos": 1.0, "time.time_left": 1.0,
    }
    for key, value in fields.items():
        parts = key.split("__")  # incoming__0__range -> incoming[0].range
        base[f"{parts[0]}[{parts[1]}].{parts[2]}" if len(parts) == 3 else ".".join(parts)] = value
    obs = torch.zeros(n, LAYOUT.size)
    for name, value in base.items():
        obs[:, LAYOUT.index(name)] = torch.as_tensor(value, dtype=torch.float32)
    return obs


def with_bearing(deg: list[float], **fields) -> torch.Tensor:
    rad = torch.tensor(deg) * math.pi / 180
    return make_obs(len(deg), enemy__bearing_cos=rad.cos().tolist(), enemy__bearing_sin=rad.sin().tolist(), **fields)


# ---------------------------------------------------------------- base contract, random, registry

def test_base_agent_checks_its_inputs():
    agent = StraightAgent(4, LAYOUT)
    with pytest.raises(ValueError, match=r"obs must have shape \(4, "):
        agent.act(torch.zeros(3, LAYOUT.size))
    with pytest.raises(ValueError, match="obs must have shape"):
        agent.act(torch.zeros(4, LAYOUT.size + 1))
    with pytest.raises(ValueError, match="env_mask must be a bool tensor"):
        agent.reset(torch.zeros(4))
    with pytest.raises(ValueError, match=r"env_mask must have shape \(4,\)"):
        agent.reset(torch.zeros(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="num_envs must be an integer >= 1"):
        StraightAgent(0, LAYOUT)
    with pytest.raises(ValueError, match="action_mode must be one of"):
        StraightAgent(1, LAYOUT, action_mode="analog")
    with pytest.raises(NotImplementedError):
        BaseAgent(2).act(torch.zeros(2, 3))


def test_random_agent_is_seeded_and_in_range():
    obs = torch.zeros(512, LAYOUT.size)
    a1 = RandomAgent(512, seed=3).act(obs)
    a2 = RandomAgent(512, seed=3).act(obs)
    a3 = RandomAgent(512, seed=4).act(obs)
    assert a1.dtype == torch.int64 and a1.shape == (512, 3)
    assert torch.equal(a1, a2) and not torch.equal(a1, a3)
    assert set(a1[:, 0].tolist()) == {0, 1, 2} and set(a1[:, 1].tolist()) == {0, 1, 2}
    assert set(a1[:, 2].tolist()) == {0, 1}
    c = RandomAgent(512, action_mode="continuous", seed=1).act(obs)
    assert c.dtype == torch.float32
    assert c[:, 0].min() >= -1 and c[:, 0].max() <= 1 and c[:, 0].min() < -0.5
    assert c[:, 1].min() >= 0 and c[:, 1].max() <= 1


def test_make_agent_builds_every_scripted_name_and_rejects_unknown():
    expected = {"straight": StraightAgent, "pursuit": PursuitAgent, "shooter": ShooterAgent,
                "crank": CrankAgent, "random": RandomAgent}
    for name, cls in expected.items():
        agent = make_agent(name, 3, LAYOUT, "cpu")
        assert type(agent) is cls and agent.num_envs == 3 and agent.device == torch.device("cpu")
        assert agent.act(make_obs(3)).shape == (3, 3)
    with pytest.raises(ValueError, match="unknown agent 'kamikaze'"):
        make_agent("kamikaze", 1, LAYOUT)


def test_make_agent_leaves_checkpoints_to_the_pipeline(tmp_path):
    # Loading a checkpoint needs the learner, a floor above agents: pipeline.config.specs does it.
    for spec in ("/nonexistent/policy.pt", "run/ckpt.pth", str(tmp_path)):
        with pytest.raises(ValueError, match=r"is a checkpoint: .*pipeline\.config\.specs\.build_agent"):
            make_agent(spec, 1, LAYOUT)


class ConstantTurner(BaseAgent):
    """An agent defined outside the package, for the import-path route."""

    def __init__(self, num_envs: int, device="cpu"):
        super().__init__(num_envs, device)

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tensor([2, 2, 0]).expand(obs.shape[0], 3).clone()


def not_an_agent(num_envs: int) -> int:
    """A factory that builds the wrong thing."""
    return num_envs


def test_make_agent_loads_import_paths():
    agent = make_agent("tests.test_agents:ConstantTurner", 2, LAYOUT)
    # Compared by name: pytest may have imported this file under another module name.
    assert type(agent).__name__ == "ConstantTurner"
    assert agent.act(make_obs(2)).tolist() == [[2, 2, 0], [2, 2, 0]]
    with pytest.raises(ValueError, match="cannot import module"):
        make_agent("no_such_module_xyz:Agent", 1, LAYOUT)
    with pytest.raises(ValueError, match="has no attribute 'Nope'"):
        make_agent("tests.test_agents:Nope", 1, LAYOUT)
    with pytest.raises(ValueError, match=r"not an agents\.BaseAgent"):
        make_agent("tests.test_agents:not_an_agent", 1, LAYOUT)


# ---------------------------------------------------------------- policy agent

def test_policy_agent_wraps_the_learner_network():
    torch.manual_seed(0)
    policy = ActorCritic(LAYOUT.size, ActionSpec.for_sim(SimConfig()), hidden_sizes=(16,))
    agent = PolicyAgent(policy, 5, deterministic=True)
    obs = make_obs(5) + 0.1 * torch.randn(5, LAYOUT.size)
    actions = agent.act(obs)
    assert actions.shape == (5, 3) and actions.dtype == torch.int64
    assert torch.equal(actions, policy.act(obs, deterministic=True)[0])
    assert agent.train() is agent and policy.training
    assert agent.eval() is agent and not policy.training
    with pytest.raises(ValueError, match=r"obs must have shape \(5, "):
        agent.act(torch.zeros(5, LAYOUT.size - 1))
    with pytest.raises(ValueError, match="must have an act"):
        PolicyAgent(torch.nn.Linear(2, 2), 1)


def test_a_policy_agent_samples_the_actions_act_samples_without_the_critic():
    # The agent asks the network for its actions alone (act_only): the same random numbers
    # drawn, so the same sampled actions as act() from the same generator state, and the
    # critic never runs.
    torch.manual_seed(0)
    critic_calls: list[int] = []
    for mirror in (False, True):
        policy = ActorCritic(LAYOUT.size, ActionSpec.for_sim(SimConfig()), hidden_sizes=(16,),
                             mirror=sim_mirror(SimConfig()) if mirror else None)
        obs = make_obs(64) + 0.5 * torch.randn(64, LAYOUT.size)
        agent = PolicyAgent(policy, 64, seed=7)
        expected = policy.act(obs, generator=torch.Generator().manual_seed(7))[0]
        hook = policy.critic.register_forward_hook(lambda *_: critic_calls.append(1))
        try:
            actions = agent.act(obs)
        finally:
            hook.remove()
        assert torch.equal(actions, expected)
        assert not critic_calls
        assert torch.equal(policy.act_only(obs, deterministic=True), policy.act(obs, deterministic=True)[0])


def test_sampling_policy_agent_draws_from_its_own_seeded_generator():
    torch.manual_seed(0)
    policy = ActorCritic(LAYOUT.size, ActionSpec.for_sim(SimConfig()), hidden_sizes=(16,))
    obs = make_obs(64)
    runs = []
    for global_seed in (1, 2):
        agent = PolicyAgent(policy, 64, seed=7)
        assert len(agent.generators()) == 1
        torch.manual_seed(global_seed)
        runs.append(agent.act(obs))
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], PolicyAgent(policy, 64, seed=8).act(obs))


# ---------------------------------------------------------------- scripted rules

def test_straight_flies_straight_and_never_fires():
    obs = with_bearing([-170, -30, 0, 10, 90])
    assert StraightAgent(5, LAYOUT).act(obs).tolist() == [[1, 2, 0]] * 5
    cont = StraightAgent(5, LAYOUT, action_mode="continuous").act(obs)
    assert cont.tolist() == [[0.0, 1.0, 0.0]] * 5


def test_pursuit_is_the_builtin_pursuit_rule():
    g = torch.Generator().manual_seed(0)
    obs = torch.rand(256, LAYOUT.size, generator=g) * 2 - 1
    ang = torch.rand(256, generator=g) * 2 * math.pi
    obs[:, LAYOUT.index("enemy.bearing_cos")] = ang.cos()
    obs[:, LAYOUT.index("enemy.bearing_sin")] = ang.sin()
    obs[:8, LAYOUT.index("enemy.bearing_sin")] = torch.tensor([0.0, 0.01, -0.01, 0.02, -0.02, 0.03, -0.03, 0.0])
    assert torch.equal(PursuitAgent(256, LAYOUT).act(obs), pursuit_actions(obs, LAYOUT))
    # Left of the nose: turn left (rudder index 2); right: turn right; behind: turn left.
    assert PursuitAgent(3, LAYOUT).act(with_bearing([45, -45, 180])).tolist() == [[2, 2, 0], [0, 2, 0], [2, 2, 0]]


def test_shooter_fires_only_inside_reach_and_cone_one_missile_at_a_time():
    shooter = ShooterAgent(6, LAYOUT)
    # Head-on at 300 / 300 m/s the reach is about 62 km; the shooter uses 85 % of it.
    obs = with_bearing([0, 25, 35, 0, 0, 0],
                       enemy__range=[v / RANGE_SCALE_M for v in (20e3, 20e3, 20e3, 56e3, 20e3, 20e3)],
                       own_missile__0__present=[0, 0, 0, 0, 1, 0],
                       own__fire_ready=[1, 1, 1, 1, 1, 0.4])
    fire = shooter.act(obs)[:, 2].tolist()
    assert fire == [1, 1, 0, 0, 0, 0]
    # Pursues while it shoots.
    assert torch.equal(shooter.act(obs)[:, :2], pursuit_actions(obs, LAYOUT)[:, :2])


def test_shooter_reach_depends_on_the_target_aspect():
    # 20 km away: a nose-on target is in reach, one flying away at 450 m/s is not.
    nose_on = make_obs(1)
    tail = make_obs(1, enemy__rel_heading_cos=1.0, enemy__speed=450 / SPEED_SCALE_MPS, enemy__nose_on_cos=-1.0)
    shooter = ShooterAgent(1, LAYOUT)
    assert shooter.act(nose_on)[0, 2] == 1
    assert shooter.act(tail)[0, 2] == 0


def _incoming(range_m: float, closing_mps: float, speed_mps: float, bearing_deg: float) -> dict:
    b = math.radians(bearing_deg)
    return {
        "incoming__0__present": 1.0, "incoming__0__range": range_m / RANGE_SCALE_M,
        "incoming__0__closing_speed": closing_mps / CLOSING_SCALE_MPS,
        "incoming__0__speed": speed_mps / MISSILE_SPEED_SCALE_MPS,
        "incoming__0__bearing_cos": math.cos(b), "incoming__0__bearing_sin": math.sin(b),
    }


def test_crank_holds_the_target_near_fifty_degrees_while_its_missile_flies():
    crank = CrankAgent(5, LAYOUT)
    obs = with_bearing([0, 30, 50, 70, -30], own_missile__0__present=1.0)
    rudder = crank.act(obs)[:, 0].tolist()
    # 0° and 30° left: turn right (away) to open the angle; 50°: hold; 70°: turn back left;
    # 30° right: turn left.
    assert rudder == [0, 0, 1, 2, 2]
    assert crank.act(obs)[:, 2].tolist() == [0] * 5  # one missile at a time


def test_crank_fires_at_long_range_before_the_shooter():
    crank, shooter = CrankAgent(1, LAYOUT), ShooterAgent(1, LAYOUT)
    obs = make_obs(1, enemy__range=58e3 / RANGE_SCALE_M)  # inside the 62 km reach, outside 85 %
    assert crank.act(obs)[0, 2] == 1 and shooter.act(obs)[0, 2] == 0


def test_crank_defends_against_a_short_time_to_impact_and_reengages_when_spent():
    crank = CrankAgent(5, LAYOUT)
    cases = [
        _incoming(10e3, 1500, 1200, 30),   # 6.7 s to impact, on the left: turn right, no shot
        _incoming(10e3, 1500, 1200, -30),  # on the right: turn left
        _incoming(10e3, 1500, 1200, 179),  # already behind: fly straight away
        _incoming(40e3, 1500, 1200, 30),   # 27 s to impact: not yet, engage (pursue, fire)
        _incoming(10e3, 100, 330, 179),    # below Mach 1: spent, re-engage (pursue, fire)
    ]
    obs = torch.cat([make_obs(1, **c) for c in cases])
    actions = crank.act(obs)
    assert actions[:, 0].tolist() == [0, 2, 1, 1, 1]
    assert actions[:, 2].tolist() == [0, 0, 0, 1, 1]


@pytest.mark.parametrize("cls", [StraightAgent, PursuitAgent, ShooterAgent, CrankAgent])
def test_scripted_agents_give_the_same_commands_in_both_action_modes(cls):
    obs = with_bearing([-120, -40, -5, 0, 5, 40, 120], enemy__range=30e3 / RANGE_SCALE_M)
    disc = cls(7, LAYOUT).act(obs)
    cont = cls(7, LAYOUT, action_mode="continuous").act(obs)
    assert torch.equal(disc[:, 0] - 1, cont[:, 0].long())
    assert torch.equal(disc[:, 1], (cont[:, 1] * 2).long())
    assert torch.equal(disc[:, 2], cont[:, 2].long())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_scripted_agents_on_cuda_match_the_cpu():
    g = torch.Generator().manual_seed(1)
    obs = with_bearing((torch.rand(64, generator=g) * 360 - 180).tolist(),
                       enemy__range=(torch.rand(64, generator=g) * 0.9).tolist())
    for name in ("straight", "pursuit", "shooter", "crank"):
        cpu = make_agent(name, 64, LAYOUT).act(obs)
        gpu = make_agent(name, 64, LAYOUT, "cuda").act(obs.cuda())
        assert gpu.device.type == "cuda"
        assert torch.equal(gpu.cpu(), cpu), name


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_agents_on_bare_cuda_act_without_host_sync():
    """``"cuda"`` is stored as the indexed device its tensors report, so a scripted agent never
    mistakes its own tables for foreign ones and copies them again (a blocking copy per step)."""
    obs = with_bearing([-120, -5, 0, 40], enemy__range=30e3 / RANGE_SCALE_M).cuda()
    for name in ("random", "straight", "pursuit", "shooter", "crank"):
        agent = make_agent(name, 4, LAYOUT, "cuda")
        assert agent.device == obs.device
        agent.act(obs)  # first call may move tables
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            agent.act(obs)
        finally:
            torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("name", ["crank", pytest.param("shooter", marks=pytest.mark.slow)])
def test_a_compiled_scripted_agent_acts_exactly_as_its_eager_twin(name):
    from sim import BatchedSim

    sim = BatchedSim(64, SimConfig(), seed=4)
    obs = sim.reset().clone()
    eager = make_agent(name, 64, LAYOUT, sim_config=SimConfig())
    compiled = make_agent(name, 64, LAYOUT, sim_config=SimConfig()).compile()
    learner_side = make_agent("pursuit", 64, LAYOUT, sim_config=SimConfig())
    fired = 0
    with torch.no_grad():
        for _ in range(120):
            a = eager.act(obs[:, 1])
            assert torch.equal(compiled.act(obs[:, 1]), a)
            fired += int(a[:, 2].sum())
            out = sim.step(torch.stack([learner_side.act(obs[:, 0]), a], 1))
            obs = out.obs.clone()
            eager.reset(out.done)
            compiled.reset(out.done)
    assert fired > 0  # the fights got far enough for the launch logic to matter
