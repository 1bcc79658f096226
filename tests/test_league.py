"""The self-play league: grouped opponents in one batch, PFSP draws, ratings, snapshots in
``RUN/league/``, draining groups, the accelerator path (whole runs: ``test_league_runs.py``)."""

from __future__ import annotations

import pytest
import torch

from agents.base import RandomAgent
from agents.grouped import GroupedOpponent
from agents.registry import make_agent
from pipeline.config import ConfigError, LeagueConfig, resolve
from pipeline.league.matchmaking import LATEST, POLICY, League
from pipeline.league.records import LEARNER, Record
from sim import ObsLayout, SimConfig

LAYOUT = ObsLayout.from_config(SimConfig())


def scripted(name: str, n: int, seed: int = 0):
    return make_agent(name, n, LAYOUT, seed=seed, sim_config=SimConfig())


def obs(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, LAYOUT.size, generator=g)


@pytest.mark.parametrize("on_device", [False, True])
def test_each_group_is_flown_by_its_own_candidate(on_device):
    groups = [{"straight": scripted("straight", 4), "pursuit": scripted("pursuit", 4),
               "random": RandomAgent(4, seed=g)} for g in range(3)]
    opp = GroupedOpponent(groups, select_on_device=on_device)
    opp.assign(0, "pursuit")
    opp.assign(1, "straight")
    opp.assign(2, "pursuit")
    o = obs(12)
    actions = opp.act(o).clone()
    assert actions.shape == (12, 3) and actions.dtype == torch.int64
    assert torch.equal(actions[0:4], scripted("pursuit", 4).act(o[0:4]))
    assert torch.equal(actions[4:8], scripted("straight", 4).act(o[4:8]))
    assert torch.equal(actions[8:12], scripted("pursuit", 4).act(o[8:12]))
    assert opp.group_mask(1).tolist() == [False] * 4 + [True] * 4 + [False] * 4


def test_reassigning_a_group_allocates_nothing():
    groups = [{"straight": scripted("straight", 4), "random": RandomAgent(4)} for _ in range(2)]
    opp = GroupedOpponent(groups)
    out = opp.act(obs(8))
    ptr = out.data_ptr()
    opp.assign(1, "random")
    assert opp.act(obs(8)).data_ptr() == ptr  # the same output buffer
    assert opp.current == ["straight", "random"]


def test_a_grouped_opponent_refuses_mismatched_groups():
    with pytest.raises(ValueError, match="group 1 has candidates"):
        GroupedOpponent([{"straight": scripted("straight", 2)}, {"pursuit": scripted("pursuit", 2)}])
    with pytest.raises(ValueError, match="at least one group"):
        GroupedOpponent([])
    opp = GroupedOpponent([{"straight": scripted("straight", 2)}])
    with pytest.raises(ValueError, match="unknown candidate 'crank'"):
        opp.assign(0, "crank")


def league(tmp_path, **overrides) -> League:
    return League(LeagueConfig(**overrides), tmp_path / "league", seed=0,
                  make_policy=lambda: torch.nn.Linear(1, 1))


def test_pfsp_draws_the_opponents_the_learner_scores_worst_against_most(tmp_path):
    lg = league(tmp_path, anchors=["crank", "shooter", "random"], pfsp_power=2.0, pfsp_floor=0.05)
    lg.records["crank"].add(10, 0, 90, window=500)   # learner scores 10 %
    lg.records["shooter"].add(60, 0, 40, window=500)  # 60 %
    lg.records["random"].add(100, 0, 0, window=500)   # 100 %: only the floor keeps it
    weights = dict(zip(lg.anchors, lg.weights(lg.anchors), strict=True))
    assert weights["random"] == pytest.approx(0.05)
    assert weights["crank"] > weights["shooter"] > weights["random"]
    counts = {n: 0 for n in lg.anchors}
    for _ in range(4000):
        counts[lg.draw()] += 1
    total = sum(weights.values())
    for name, w in weights.items():
        assert counts[name] / 4000 == pytest.approx(w / total, abs=0.03)


def test_self_play_mixes_past_selves_and_anchors(tmp_path):
    lg = league(tmp_path, anchors=["crank"], self_play=0.75)
    assert {lg.draw() for _ in range(50)} == {"crank"}  # no snapshot yet: anchors only
    lg.add_snapshot("v10", {"w": torch.zeros(1)})
    draws = [lg.draw() for _ in range(4000)]
    assert draws.count("v10") / 4000 == pytest.approx(0.75, abs=0.03)


def test_past_selves_wait_for_self_play_from(tmp_path):
    from learner import ActionSpec, PPOConfig, PPOLearner
    learner = PPOLearner(PPOConfig(hidden_sizes=(4,), total_updates=90), 6, ActionSpec("multi_discrete", nvec=(3, 2)))
    lg = league(tmp_path, anchors=["crank"], self_play=1.0, self_play_from=0.6667, snapshot_every=10,
                snapshot_until=0.6667)
    taken = snapshot_versions(lg, learner, range(1, 60))
    assert taken == [10, 20, 30, 40, 50] and lg.progress == pytest.approx(59 / 90)
    assert {lg.draw() for _ in range(200)} == {"crank"}  # snapshots in the pool, none drawn yet
    assert snapshot_versions(lg, learner, range(60, 91)) == [60]  # none after two thirds
    assert lg.progress == 1.0
    assert {lg.draw() for _ in range(400)} == {f"v{v}" for v in (10, 20, 30, 40, 50, 60)}
    with pytest.raises(ConfigError, match="self_play_from must be in"):
        resolve({"league": {"self_play_from": 1.5}}, device="cpu")


def test_the_latest_self_is_drawn_first_and_never_joins_the_pool(tmp_path):
    lg = league(tmp_path, anchors=["crank"], self_play=0.5, latest=0.25)
    lg.add_snapshot("v10", {"w": torch.zeros(1)})
    draws = [lg.draw() for _ in range(4000)]
    assert draws.count(LATEST) / 4000 == pytest.approx(0.25, abs=0.03)
    assert draws.count("v10") / 4000 == pytest.approx(0.375, abs=0.03)  # half of the rest
    assert LATEST not in lg.records and LATEST not in lg.players()
    plain = league(tmp_path, anchors=["crank"], self_play=0.5)  # latest = 0: the same draws as before
    plain.add_snapshot("v10", {"w": torch.zeros(1)})
    again = league(tmp_path, anchors=["crank"], self_play=0.5, latest=0.0)
    again.add_snapshot("v10", {"w": torch.zeros(1)})
    assert [plain.draw() for _ in range(200)] == [again.draw() for _ in range(200)]


def test_the_latest_self_plays_the_actors_current_weights_unrated(tmp_path):
    """A group that draws the latest self copies the actor's policy into its policy slot at the
    draw (a later draw takes the newer weights), holds it like any opponent, and credits its
    games to nobody."""
    from learner import ActionSpec, ActorCritic

    def make_policy():
        return ActorCritic(LAYOUT.size, ActionSpec.for_sim(SimConfig()), (8,))

    lg = League(LeagueConfig(anchors=["crank"], latest=1.0, hold_chunks=1, groups_per_actor=1), tmp_path / "league",
                seed=0, make_policy=make_policy)
    seat = _Seat(2)
    seat.policy = make_policy()
    seat.opponent = lg.make_opponent(2, lambda name, n, s: scripted(name, n, s), seat.device, 0, False)
    slot = seat.opponent.candidates[0][POLICY].policy

    def same(a, b) -> bool:
        return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))

    lg.before_chunk(seat)
    assert seat.opponent.current == [POLICY] and lg.assignments() == {0: [LATEST]}
    assert same(slot, seat.policy) and slot is not seat.policy
    with torch.no_grad():
        for p in seat.policy.parameters():
            p.add_(1.0)  # the learner moves on; the group keeps the weights it drew
    assert not same(slot, seat.policy)
    lg.before_chunk(seat)  # hold over: the group drains, keeping its opponent
    assert not same(slot, seat.policy) and lg.draws_of(0) == [(LATEST, 1)]
    seat.end([0, 1])
    lg.before_chunk(seat)  # drained: a new draw takes the newer weights
    assert same(slot, seat.policy)
    assert lg.draws_of(0) == [(LATEST, 2)]
    assert lg.records["crank"].games == 0 and lg.standing() == {}


def test_the_pool_keeps_the_newest_snapshots(tmp_path):
    lg = league(tmp_path, max_snapshots=2)
    for v in (10, 20, 30):
        lg.add_snapshot(f"v{v}", {"w": torch.full((1,), float(v))})
    assert list(lg.snapshots) == ["v20", "v30"]


def snapshot_versions(lg: League, learner, versions) -> list[int]:
    """The versions at which the learner thread, calling after each update, snapshots."""
    taken = []
    for v in versions:
        learner.policy_version = v
        if lg.maybe_snapshot(learner) is not None:
            taken.append(v)
    return taken


@pytest.mark.parametrize("anneal", [True, False])
def test_snapshots_can_be_spaced_by_learning_instead_of_updates(tmp_path, anneal):
    from learner import ActionSpec, PPOConfig, PPOLearner
    learner = PPOLearner(PPOConfig(hidden_sizes=(4,), total_updates=100, anneal_lr=anneal), 6,
                         ActionSpec("multi_discrete", nvec=(3, 2)))
    by_updates = snapshot_versions(league(tmp_path / "u", snapshot_every=10, snapshot_clock="updates",
                                          max_snapshots=20), learner, range(1, 101))
    assert by_updates == list(range(10, 101, 10))
    taken = snapshot_versions(league(tmp_path / "l", snapshot_every=10, max_snapshots=20,
                                     snapshot_clock="learning"), learner, range(1, 101))
    if not anneal:  # a constant rate: every update is a full one
        assert taken == by_updates
        return
    # Annealed to 0 over 100 updates, version v has learned sum(1 - u/100 for u < v), 50.5 in
    # all: a snapshot as it passes 10, 20, 30, 40 and 50, further apart as the rate falls.
    assert taken == [11, 23, 37, 55, 91]  # v - v(v - 1)/200: gaps of 12, 14, 18 and 36 updates
    # A resumed run (a new league that read league.json) keeps the cadence.
    lg2 = league(tmp_path / "l2", snapshot_every=10, max_snapshots=20, snapshot_clock="learning")
    snapshot_versions(lg2, learner, range(1, 40))
    lg2.save()
    resumed = league(tmp_path / "l2", snapshot_every=10, max_snapshots=20, snapshot_clock="learning")
    resumed.load()
    assert snapshot_versions(resumed, learner, range(40, 101)) == [55, 91]


def test_the_pool_is_frozen_after_snapshot_until(tmp_path):
    from learner import ActionSpec, PPOConfig, PPOLearner
    learner = PPOLearner(PPOConfig(hidden_sizes=(4,), total_updates=100), 6, ActionSpec("multi_discrete", nvec=(3, 2)))
    lg = league(tmp_path / "a", snapshot_every=10, snapshot_clock="updates", max_snapshots=20,
                snapshot_until=0.55)
    assert snapshot_versions(lg, learner, range(1, 101)) == [10, 20, 30, 40, 50]
    assert sorted(p.name for p in (tmp_path / "a" / "league").glob("ckpt_*.pt")) == [
        f"ckpt_{v:09d}.pt" for v in (10, 20, 30, 40, 50)]
    # On the learning clock too: the cut is in updates, whatever the clock counts.
    lg = league(tmp_path / "b", snapshot_every=10, max_snapshots=20, snapshot_clock="learning",
                snapshot_until=0.5)
    assert snapshot_versions(lg, learner, range(1, 101)) == [11, 23, 37]
    # A resumed run stays frozen.
    lg.save()
    resumed = league(tmp_path / "b", snapshot_every=10, max_snapshots=20, snapshot_clock="learning",
                     snapshot_until=0.5)
    resumed.load()
    assert snapshot_versions(resumed, learner, range(60, 101)) == []


def test_pfsp_draw_sets_what_a_draw_counts_for(tmp_path):
    """With ``pfsp_draw=0`` an opponent the learner only draws with weighs like one it loses to;
    with the default half a win it weighs like an even one."""
    lg = league(tmp_path, anchors=["flee", "crank", "random"], pfsp_power=1.0, pfsp_floor=0.01)
    lg.records["flee"].add(0, 100, 0, window=500)     # every game drawn
    lg.records["crank"].add(0, 0, 100, window=500)    # every game lost
    lg.records["random"].add(50, 0, 50, window=500)   # even
    half = dict(zip(lg.anchors, lg.weights(lg.anchors), strict=True))
    assert half["flee"] == pytest.approx(half["random"]) and half["crank"] > 1.9 * half["flee"]
    hard = league(tmp_path, anchors=list(lg.anchors), pfsp_power=1.0, pfsp_floor=0.01, pfsp_draw=0.0)
    hard.records = lg.records
    weights = dict(zip(hard.anchors, hard.weights(hard.anchors), strict=True))
    assert weights["flee"] == pytest.approx(weights["crank"]) == pytest.approx(1.0 - 0.5 / 101)
    assert weights["random"] == pytest.approx(half["random"])  # no draws: the same weight
    with pytest.raises(ConfigError, match="pfsp_draw"):
        resolve({"league": {"pfsp_draw": 1.5}}, device="cpu")


def test_ratings_order_the_players_by_their_results(tmp_path):
    lg = league(tmp_path, anchors=["crank", "random"])
    lg.records["crank"].add(20, 0, 80, window=10_000)
    lg.records["random"].add(95, 0, 5, window=10_000)
    ratings = lg.refit()
    assert ratings["crank"] > ratings[LEARNER] > ratings["random"]
    # 20 % against crank: about 240 Elo below it (400·log10(4)), the virtual draw aside.
    assert ratings["crank"] - ratings[LEARNER] == pytest.approx(240, abs=25)


def test_recent_counts_forget_old_games():
    r = Record()
    r.add(100, 0, 0, window=50)
    r.add(0, 0, 100, window=50)
    assert r.wins == 100 and r.losses == 100
    assert r.p_win() < 0.2  # the last 100 games weigh far more


class _Seat:
    """An actor's side of the league contract, around a real GroupedOpponent and EpisodeStats:
    the test plays the episodes' ends itself."""

    def __init__(self, n: int):
        from actors.stats import EpisodeStats
        self.actor_id, self.device = 0, torch.device("cpu")
        self.opponent = GroupedOpponent([{"crank": scripted("crank", n)}])
        self.stats = EpisodeStats(n, 4, learning_side=0, device=self.device, per_env=True)
        self.restarts: list[list[bool]] = []

    def restart_envs(self, mask: torch.Tensor) -> None:
        self.restarts.append(mask.tolist())
        self.stats.forget(mask)

    def end(self, winners: list[int]) -> None:
        """One step: environment i ends with ``winners[i]`` (0 red = the learner, 1 blue,
        2 draw), or keeps running (−1)."""
        from types import SimpleNamespace
        w = torch.tensor(winners)
        out = SimpleNamespace(done=w >= 0, winner=w, episode_steps=torch.full_like(w, 10))
        self.stats.update_counts(out, torch.zeros(len(winners)))


def test_a_group_due_for_a_new_opponent_drains_so_long_fights_are_counted(tmp_path):
    lg = league(tmp_path, anchors=["crank"], hold_chunks=2)
    seat = _Seat(2)
    lg.before_chunk(seat)  # draws crank; both environments start
    seat.end([0, -1])  # env 0 wins a short fight; env 1's fight goes on
    lg.before_chunk(seat)
    seat.end([0, -1])
    lg.before_chunk(seat)  # time is up: drain, no switch while env 1's fight runs
    assert seat.restarts == [[True, True]]
    seat.end([0, -1])  # the fight env 0 was in when the drain began: counted
    seat.end([0, -1])  # started during the drain: not counted
    lg.before_chunk(seat)
    assert seat.restarts == [[True, True]]
    seat.end([1, 2])  # env 0's third (not counted); env 1's long fight ends in a draw: counted
    lg.before_chunk(seat)  # drained: switch (crank again) and restart both
    assert seat.restarts == [[True, True], [True, True]]
    r = lg.records["crank"]
    assert (r.wins, r.draws, r.losses) == (3, 1, 0)  # cutting at the hold would give (2, 0, 0)


@pytest.mark.parametrize("action_mode", ["discrete", pytest.param("continuous", marks=pytest.mark.slow)])
def test_a_league_opponent_on_the_accelerator_path_reads_no_device_data(action_mode):
    """The graph-safe form (every candidate acts, a device-side choice picks the actions) runs
    whole chunks on the meta device, where any host read raises; reassigning a group and
    copying a snapshot's weights in between chunks is device-side too."""
    from actors.sim_actor import SimActor
    from agents.policy import PolicyAgent
    from core.schema import RolloutSpec
    from learner import ActionSpec, ActorCritic
    from pipeline.transport.ring import RolloutRing
    from rewards import make_reward

    cfg = SimConfig(action_mode=action_mode)
    spec = ActionSpec.for_sim(cfg)

    def net():
        return ActorCritic(LAYOUT.size, spec, hidden_sizes=(16,)).to("meta")

    groups = [{"crank": make_agent("crank", 4, LAYOUT, "meta", sim_config=cfg, action_mode=action_mode),
               "random": make_agent("random", 4, LAYOUT, "meta", sim_config=cfg, action_mode=action_mode),
               "policy": PolicyAgent(net(), 4)} for _ in range(2)]
    opponent = GroupedOpponent(groups, select_on_device=True)
    actor = SimActor(0, cfg, 8, 3, net(), opponent, make_reward("outcome", "meta", layout=LAYOUT),
                     device="meta", seed=5)
    ring = RolloutRing(RolloutSpec(3, 8, LAYOUT.size, 3, action_dtype=actor.spec.action_dtype), 1,
                       placement="device", actor_device="meta", learner_device="meta")
    slot = ring.acquire_write(0)
    actor.rollout(slot)
    snapshot = net().state_dict()
    opponent.candidates[1]["policy"].policy.load_state_dict(snapshot)
    opponent.assign(1, "policy")
    opponent.assign(0, "random")
    actor.restart_envs(opponent.group_mask(1))
    actor.rollout(slot)
    assert all(t.device.type == "meta" for t in slot.tensors().values())
