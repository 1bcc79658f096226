"""Live progress: a rich table on a terminal, plain log lines elsewhere.

The loops hand a :class:`Progress` snapshot to :meth:`Display.update` every
``run.log_interval_s``; every snapshot is also written to the run log, so a run without a
terminal leaves the same record.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Progress:
    """One snapshot of a run, host values only."""

    mode: str
    """``async`` or ``sync``."""
    device: str
    elapsed_s: float
    agent_steps: int
    """Agent-steps produced so far (this run, including any resumed part)."""
    total_steps: int
    agent_steps_per_s: float
    """Over the last interval."""
    updates: int
    updates_per_s: float
    policy_version: int
    policy_lag_mean: float
    """Mean lag of the chunks consumed in the last interval (versions)."""
    win_rate: float
    """Wins per finished episode over the recent window, against ``opponent``."""
    draw_rate: float
    """Draws (time limit, mutual kills, ammunition out) per finished episode, same window."""
    loss_rate: float
    """Losses per finished episode, same window."""
    episodes: int
    """Episodes finished in the recent window."""
    opponent: str
    ring_ready: int
    ring_free: int
    dropped_chunks: int
    actor_failures: int
    return_mean: float | None = None
    """Mean return of the recent episodes (Gymnasium envs, which have no winner)."""
    league: str = ""
    """The league's one-line standing (``--opponent league``), else empty."""

    def outcomes(self) -> str:
        """The recent episodes: win/draw/loss against the opponent, or the mean return."""
        if self.return_mean is not None:
            return f"return {self.return_mean:.1f} over {self.episodes} episodes"
        return (f"win/draw/loss {self.win_rate:.1%}/{self.draw_rate:.1%}/{self.loss_rate:.1%} of "
                f"{self.episodes} vs {self.opponent}")

    def line(self) -> str:
        """A one-line rendering for logs."""
        return (
            f"[{self.mode}] {self.elapsed_s:6.1f}s steps {self.agent_steps}/{self.total_steps} "
            f"({self.agent_steps_per_s:,.0f}/s) updates {self.updates} ({self.updates_per_s:.2f}/s) "
            f"v{self.policy_version} lag {self.policy_lag_mean:.2f} {self.outcomes()} "
            f"ring ready {self.ring_ready} free {self.ring_free} dropped {self.dropped_chunks} "
            f"failures {self.actor_failures}" + (f" | {self.league}" if self.league else "")
        )


class Display:
    """Plain display: one log line per update (also the base of the others)."""

    def __init__(self, logger: logging.Logger, echo: bool = True):
        self.logger = logger
        self.echo = echo

    def update(self, progress: Progress) -> None:
        """Show and log one snapshot."""
        self.logger.info(progress.line())
        if self.echo:
            print(progress.line(), flush=True)

    def message(self, text: str) -> None:
        """Show and log a one-off message."""
        self.logger.info(text)
        if self.echo:
            print(text, flush=True)

    def close(self) -> None:
        """Stop any live rendering."""


class RichDisplay(Display):
    """A live-updating rich table."""

    def __init__(self, logger: logging.Logger):
        super().__init__(logger, echo=False)
        from rich.console import Console
        from rich.live import Live

        self.console = Console()
        self.live: Any = Live(console=self.console, refresh_per_second=4, transient=False)
        self.live.start()

    def update(self, progress: Progress) -> None:
        from rich.table import Table

        self.logger.info(progress.line())
        p = progress
        table = Table(title=f"midrange-rl · {p.mode} on {p.device} · {p.elapsed_s:.0f}s", show_header=False)
        table.add_column(style="bold cyan")
        table.add_column(justify="right")
        pct = 100.0 * p.agent_steps / max(p.total_steps, 1)
        table.add_row("agent-steps", f"{p.agent_steps:,} / {p.total_steps:,} ({pct:.0f}%)")
        table.add_row("agent-steps/s", f"{p.agent_steps_per_s:,.0f}")
        table.add_row("updates (/s)", f"{p.updates} ({p.updates_per_s:.2f})")
        table.add_row("policy version", str(p.policy_version))
        table.add_row("policy lag", f"{p.policy_lag_mean:.2f}")
        if p.return_mean is not None:
            table.add_row("mean return", f"{p.return_mean:.1f} ({p.episodes} episodes)")
        else:
            table.add_row(f"win rate vs {p.opponent}", f"{p.win_rate:.1%} ({p.episodes} episodes)")
            table.add_row("draws / losses", f"{p.draw_rate:.1%} / {p.loss_rate:.1%}")
        if p.league:
            table.add_row("league", p.league.removeprefix("league: "))
        table.add_row("ring ready / free", f"{p.ring_ready} / {p.ring_free}")
        table.add_row("dropped chunks", str(p.dropped_chunks))
        table.add_row("actor failures", str(p.actor_failures))
        self.live.update(table)

    def message(self, text: str) -> None:
        self.logger.info(text)
        self.console.print(text, soft_wrap=True, markup=False, highlight=False)

    def close(self) -> None:
        if self.live.is_started:
            self.live.stop()
            self.console.print()


def make_display(kind: str, logger: logging.Logger) -> Display:
    """``auto``: rich on a terminal, plain otherwise; ``none`` logs only."""
    if kind == "rich" or (kind == "auto" and sys.stdout.isatty()):
        return RichDisplay(logger)
    return Display(logger, echo=kind != "none")
