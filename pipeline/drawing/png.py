"""``python -m pipeline.replay FILE --png OUT``: the whole fight on one top-down picture.

Both fighters' tracks (red, blue) with a dot and label every ``tick_s`` seconds, every missile's
track (thin, dashed after motor burn-out) from its launch marker to where it ended (a star
where it hit, a small cross where it was lost otherwise), the destroyed fighter's cross, a
scale bar, a legend, and the outcome in the title. Drawn with matplotlib (the ``viz`` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from core.files import atomic_write
from sim.replay.episode import printable
from sim.replay.format import Replay

SIDE_NAMES = ("red", "blue")
SIDE_COLORS = ("#dc2828", "#285ae6")
MISSILE_COLORS = ("#960000", "#002896")


def require_matplotlib(what: str) -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or an ``ImportError`` saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"{what} needs matplotlib: pip install 'midrange-rl[viz]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def short_spec(spec: str) -> str:
    """An agent spec for a title: a checkpoint path keeps its last two parts."""
    parts = Path(spec).parts
    return str(Path(*parts[-2:])) if len(parts) > 2 else spec


def outcome_text(replay: Replay) -> str:
    """``red: A vs blue: B · blue wins (kill) at 20.9 s``."""
    o = replay.outcome
    winner = o.get("winner", "?")
    result = "draw" if winner == "draw" else f"{winner} wins"
    return (f"red: {short_spec(replay.agent('red'))} vs blue: {short_spec(replay.agent('blue'))} · {result} "
            f"({o.get('end_reason', '?')}) at {float(o.get('t_s', 0.0)):.1f} s")


def save_figure(fig: Any, path: Path, fmt: str = "png", dpi: int = 120) -> None:
    """Save atomically (``core.files``)."""
    with atomic_write(path) as out:
        fig.savefig(out, format=fmt, dpi=dpi)


def write_png(replay: Replay, path: Path, tick_s: float | None = None) -> None:
    """Draw ``replay`` into ``path`` (PNG); time ticks every ``tick_s`` seconds (default: 5, 10,
    20, 30 or 60, whichever gives at most a dozen)."""
    plt = require_matplotlib("--png")
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

    a = replay.arrays
    t = a["t_s"]
    if tick_s is None:
        tick_s = next((s for s in (5.0, 10.0, 20.0, 30.0) if float(t[-1]) / s <= 12), 60.0)
    km = 1e-3
    fig, ax = plt.subplots(figsize=(8, 8))
    try:
        for s in (0, 1):
            alive = a["f_alive"][:, s]
            # The track up to and including the frame the fighter was destroyed in.
            end = int(np.argmin(alive)) + 1 if not alive.all() else len(t)
            x, y = a["f_x"][:end, s] * km, a["f_y"][:end, s] * km
            ax.plot(x, y, color=SIDE_COLORS[s], lw=2, label=f"{SIDE_NAMES[s]} fighter")
            ax.plot(x[0], y[0], "o", color=SIDE_COLORS[s], ms=7, mfc="white")
            ticks = [i for i in range(1, end) if int(t[i] // tick_s) > int(t[i - 1] // tick_s)]
            ax.plot(x[ticks], y[ticks], ".", color=SIDE_COLORS[s], ms=6)
            for i in ticks:
                ax.annotate(f"{t[i]:.0f} s", (x[i], y[i]), textcoords="offset points", xytext=(4, 4),
                            fontsize=7, color=SIDE_COLORS[s])
            if not alive.all():
                ax.plot(x[-1], y[-1], "X", color=SIDE_COLORS[s], ms=14, mec="black",
                        label=f"{SIDE_NAMES[s]} destroyed")
        hits = {e["missile"] for e in replay.events if e["kind"] == "hit"}
        labelled: set[str] = set()

        def label(text: str) -> str | None:
            if text in labelled:
                return None
            labelled.add(text)
            return text

        burn_frames = np.maximum(a["m_burn_left_s"], 0)
        for m in replay.missile_paths():
            c = MISSILE_COLORS[m.side]
            x, y = m.x * km, m.y * km
            burning = burn_frames[m.frames, m.side, m.slot] > 0
            k = int(burning.sum()) + 1  # the burning part, joined to what follows
            ax.plot(x[:k], y[:k], "-", color=c, lw=1, label=label(f"{SIDE_NAMES[m.side]} missile"))
            ax.plot(x[k - 1:], y[k - 1:], "--", color=c, lw=1)
            ax.plot(x[0], y[0], "^", color=c, ms=7, label=label("launch"))
            if m.missile in hits:
                ax.plot(x[-1], y[-1], "*", color="orange", ms=16, mec="black", label=label("hit"))
            elif m.lost:
                ax.plot(x[-1], y[-1], "x", color=c, ms=7, label=label("missile lost"))
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel("x (km, east)")
        ax.set_ylabel("y (km, north)")
        ax.grid(True, color="#e0e0e0")
        ax.set_title(outcome_text(replay), fontsize=10, parse_math=False)
        span = max(np.ptp(a["f_x"]), np.ptp(a["f_y"]), 1.0) * km
        bar = _nice_length(span / 5)
        ax.add_artist(AnchoredSizeBar(ax.transData, bar, f"{bar:g} km", "lower left", pad=0.6,
                                      frameon=False, size_vertical=span / 300))
        ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
        fig.text(0.01, 0.005, f"dots every {tick_s:g} s · dashed: motor burnt out · "
                 f"{printable(replay.path.name) if replay.path else ''}", fontsize=7, color="#555555",
                 parse_math=False)
        fig.tight_layout()
        save_figure(fig, path)
    finally:
        plt.close(fig)


def _nice_length(x: float) -> float:
    """1, 2 or 5 times a power of ten, at most ``x``."""
    p = 10 ** np.floor(np.log10(max(x, 1e-9)))
    return float(max(k * p for k in (1, 2, 5) if k * p <= x))
