"""The evaluation's results as text: the win / draw / loss table and the ratings."""

from __future__ import annotations

from pipeline.evaluation.intervals import wilson_interval
from pipeline.evaluation.matches import MatchStats


def _fmt_rate(k: int, n: int) -> str:
    lo, hi = wilson_interval(k, n)
    return f"{k / max(n, 1):6.1%} [{lo:5.1%},{hi:6.1%}]"


def format_table(stats: list[MatchStats], decision_dt_s: float) -> str:
    """The win / draw / loss table as text (one row per match)."""
    # Columns as wide as the longest name, so checkpoint paths are shown whole.
    wa = max([len("agent"), *(len(s.agent) for s in stats)])
    wo = max([len("opponent"), *(len(s.opponent) for s in stats)])
    head = f"{'agent':<{wa}} {'opponent':<{wo}} {'n':>6}  {'win [95% CI]':<22} {'draw [95% CI]':<22} {'loss [95% CI]':<22} {'mean len':>9}"
    rows = [head, "-" * len(head)]
    for s in stats:
        rows.append(
            f"{s.agent:<{wa}} {s.opponent:<{wo}} {s.episodes:>6}  {_fmt_rate(s.wins, s.episodes):<22} "
            f"{_fmt_rate(s.draws, s.episodes):<22} {_fmt_rate(s.losses, s.episodes):<22} "
            f"{s.mean_length_steps * decision_dt_s:>8.1f}s"
        )
    return "\n".join(rows)


def format_ratings(ratings: dict[str, dict[str, float]]) -> str:
    """The fitted ratings as text, best first."""
    w = max([len("entrant"), *(len(n) for n in ratings)])
    rows = [f"{'entrant':<{w}} {'elo':>7} {'± s.e.':>7}", "-" * (w + 16)]
    for name, r in sorted(ratings.items(), key=lambda kv: -kv[1]["elo"]):
        rows.append(f"{name:<{w}} {r['elo']:>7.0f} {r['stderr']:>7.0f}")
    return "\n".join(rows)
