"""The league's games of a ``torchrun`` job's ranks, exchanged at each update agreement
(``pipeline.run.rank_league``): summed when the ranks' pools agree, gathered by name when they
differ, never counted twice. Two threads stand in for two ranks' collectives."""

from __future__ import annotations

from pathlib import Path

import torch


def _two_leagues(tmp_path: Path, anchors: list[list[str]]) -> list:
    from pipeline.config import LeagueConfig
    from pipeline.league.matchmaking import League

    return [League(LeagueConfig(anchors=a), tmp_path / f"league{r}", 0, lambda: torch.nn.Linear(1, 1))
            for r, a in enumerate(anchors)]


def _between_two_threads():
    """An all-gather and an all-reduce (sum) between two threads, each called once per rank."""
    from threading import Barrier

    posted: list = [None, None]
    meet = Barrier(2)

    def gather(rank: int, own):
        posted[rank] = own
        meet.wait()
        out = list(posted)
        meet.wait()
        return out

    def reduce(rank: int, vector: list[int]) -> list[int]:
        both = gather(rank, vector)
        return [a + b for a, b in zip(*both, strict=True)]

    return gather, reduce


def _agree(sides, gather, reduce) -> list[bool]:
    """What Job.agree_to_update does with the league's games, on two threads: the packed
    results summed, and the all-gather where the ranks' names differ."""
    from concurrent.futures import ThreadPoolExecutor

    def one(rank: int) -> bool:
        side = sides[rank]
        packed = side.pack()
        if side.unpack(packed, reduce(rank, packed.vector), 2):
            return True
        side.exchange(lambda own: gather(rank, own))
        return False

    with ThreadPoolExecutor(2) as pool:
        return [f.result() for f in [pool.submit(one, r) for r in range(2)]]


def test_ranks_exchange_their_league_games_once_each(tmp_path):
    from pipeline.run.rank_league import LeagueResults

    leagues = _two_leagues(tmp_path, [["crank", "random"]] * 2)
    sides = [LeagueResults(league, rank) for rank, league in enumerate(leagues)]
    gather, reduce = _between_two_threads()
    leagues[0].records["crank"].add(3, 1, 2, window=500)
    leagues[1].records["crank"].add(1, 0, 0, window=500)
    leagues[1].records["random"].add(0, 0, 4, window=500)
    assert _agree(sides, gather, reduce) == [True, True]  # the same pool: summed in the agreement
    assert _agree(sides, gather, reduce) == [True, True]  # nothing new: nothing counted twice
    leagues[1].records["random"].add(2, 0, 0, window=500)
    assert _agree(sides, gather, reduce) == [True, True]
    assert [(side.packed, side.by_name) for side in sides] == [(3, 0), (3, 0)]
    for league in leagues:
        crank, rand = league.records["crank"], league.records["random"]
        assert (crank.wins, crank.draws, crank.losses) == (4, 1, 2)
        assert (rand.wins, rand.draws, rand.losses) == (2, 0, 4)
    assert [side.own_games for side in sides] == [6, 7] and sides[0].games() == sides[1].games() == 13
    assert len(sides[0].pack().vector) == 3 + 3 * (2 + leagues[0].config.max_snapshots)


def test_ranks_whose_pools_differ_exchange_their_games_by_name(tmp_path):
    # The slots would mean different opponents on the two ranks: every rank sees it in the sums
    # and both take the all-gather by name; a game against an opponent only one rank has stays there.
    from pipeline.run.rank_league import LeagueResults

    leagues = _two_leagues(tmp_path, [["crank", "random"], ["crank", "shooter"]])
    sides = [LeagueResults(league, rank) for rank, league in enumerate(leagues)]
    gather, reduce = _between_two_threads()
    leagues[0].records["crank"].add(1, 2, 3, window=500)
    leagues[0].records["random"].add(5, 0, 0, window=500)
    leagues[1].records["crank"].add(4, 0, 0, window=500)
    leagues[1].records["shooter"].add(0, 1, 0, window=500)
    assert _agree(sides, gather, reduce) == [False, False]
    assert _agree(sides, gather, reduce) == [False, False]  # nothing counted twice this way either
    crank = [(r.wins, r.draws, r.losses) for r in (league.records["crank"] for league in leagues)]
    assert crank == [(5, 2, 3), (5, 2, 3)]
    assert (leagues[0].records["random"].wins, leagues[1].records["shooter"].draws) == (5, 1)
    assert [side.own_games for side in sides] == [11, 5]
    assert [(side.packed, side.by_name) for side in sides] == [(0, 2), (0, 2)]
