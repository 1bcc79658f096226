"""pipeline.evaluation.heldout: a fighter judged against every held-out tactic, in real matches."""

from __future__ import annotations

from agents.tactics import HELDOUT
from pipeline.evaluation.heldout import heldout_line, heldout_matches


def test_every_heldout_tactic_is_played_and_the_lowest_win_rate_reported():
    matches = heldout_matches("crank", 4, seed=3)
    assert list(matches) == HELDOUT
    assert all(m.episodes == 4 and m.wins + m.draws + m.losses == 4 for m in matches.values())
    lowest, line = heldout_line(matches)
    rates = [m.wins / 4 for m in matches.values()]
    assert lowest == min(rates)
    assert line.startswith("held-out win/draw/loss: ")
    fields = line.removeprefix("held-out win/draw/loss: ").split()
    assert fields[::2] == [s.removeprefix("tactic:").removesuffix("?heldout") for s in HELDOUT]
    for shown, m in zip(fields[1::2], matches.values(), strict=True):
        assert [float(x) for x in shown.split("/")] == [round(k / 4, 3) for k in (m.wins, m.draws, m.losses)]
