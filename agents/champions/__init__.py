"""Champions: trained fighters shipped with the package, flown by name like the scripted agents.

Each is a policy-only file beside this module (the policy network, its observation layout and
the simulator it was trained on; no optimizer state), loaded and checked like any checkpoint by
``pipeline.config.specs.build_agent``: a file of another observation layout or action mode is
refused in one line naming it.

``ace``, ``ace.pt``: the final policy of a league-bench run, seed 0, the bench's recipe as of
2026-11-24 (``bench/learn_league.py``'s ``BENCH_RECIPE``: a 128×128 network, half the groups
against past selves, γ 0.995, the anchors ``crank``, ``shooter``, ``random``, ``pursuit`` and
``straight``), trained for 6M agent-steps instead of the bench's 24M::

    python bench/learn_league.py --seed 0 --run-dir RUN          # stopped at 2,492,416 agent-steps
    python -m pipeline.launch --resume RUN --total-steps 10000000  # stopped at 2,844,672
    python -m pipeline.launch --resume RUN --total-steps 6000000 --actor-processes off
    python bench/package_champion.py RUN --name ace

(each resume recomputes the learning-rate schedule and ``league.snapshot_until`` from the new
budget). Its evaluation table, wall time and device are in bench/RESULTS.md, "The champion,
ace". It is the current recipe's fighter, not one trained for tactics it never met.
"""

from __future__ import annotations

from pathlib import Path

CHAMPIONS: dict[str, Path] = {
    "ace": Path(__file__).with_name("ace.pt"),
}
"""The packaged policy file of each champion, by name."""
