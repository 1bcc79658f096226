"""The split of the tactic library into what training may meet and what only judges it.

A fighter is judged on tactics it never met: :data:`HELDOUT` specs are for evaluation only and
must never be a training opponent or a league anchor (tests/test_tactics.py checks the league's
default anchors). Four tactics are held out whole (``notch``, ``sniper``, ``skate``, ``herd``,
the last the trick a learner trained against ``ace`` found: bench/RESULTS.md, "``herd``"); nine
are only trained against (``early``, ``energy``, ``ladder``, ``bluff``, ``extend``, whose ranges
share no value with the held-out ``pump``'s either, ``flee``, the one that never fires,
``switch``, which flies the others in turn, ``wander``, which flies no idea at all, and
``reply``, which answers every shot, the trick the fresh exploiters of the league bench's
fighters found); three
are shared (``pump``, ``drag``, ``late``) with parameter ranges that are disjoint for every
parameter, so a held-out ``pump`` never flies with a parameter a training ``pump`` could have
drawn.
"""

from __future__ import annotations

from agents.tactics.base import Ranges

TRAINING_RANGES: dict[str, Ranges] = {
    "pump": {"launch_fraction": (0.8, 1.0), "crank_angle_deg": (40.0, 60.0), "defend_tti_s": (15.0, 30.0),
             "pump_fraction": (1.2, 1.5), "recommit_fraction": (1.7, 2.1)},
    "drag": {"launch_fraction": (0.8, 1.0), "crank_angle_deg": (40.0, 60.0), "defend_tti_s": (20.0, 35.0),
             "release_speed_mps": (400.0, 550.0)},
    "late": {"launch_fraction": (0.45, 0.7), "crank_angle_deg": (25.0, 50.0), "defend_tti_s": (25.0, 45.0)},
    "early": {"launch_fraction": (0.6, 1.0), "crank_angle_deg": (20.0, 60.0), "defend_tti_s": (40.0, 90.0),
              "spent_speed_mps": (300.0, 450.0), "preempt_fraction": (0.5, 1.0)},
    "energy": {"launch_fraction": (0.6, 1.0), "deadband_deg": (3.0, 20.0), "crank_angle_deg": (20.0, 60.0),
               "defend_tti_s": (8.0, 30.0)},
    "ladder": {"launch_fraction": (0.7, 1.0), "second_gap_s": (1.0, 10.0), "second_fraction": (0.5, 1.0),
               "crank_angle_deg": (20.0, 60.0), "defend_tti_s": (10.0, 40.0)},
    "bluff": {"bluff_fraction": (1.3, 3.0), "max_in_flight": (1.0, 3.0), "reserve": (0.0, 3.0),
              "launch_fraction": (0.7, 1.0), "defend_tti_s": (10.0, 40.0)},
    "extend": {"launch_fraction": (0.8, 1.0), "crank_angle_deg": (40.0, 60.0), "defend_tti_s": (15.0, 30.0),
               "pump_fraction": (1.9, 2.6), "recommit_fraction": (2.6, 3.5)},
    "flee": {"flee_fraction": (1.0, 2.0), "recommit_fraction": (1.5, 3.0), "edge_margin": (0.05, 0.3),
             "defend_tti_s": (10.0, 40.0)},
    "switch": {"mean_hold_s": (20.0, 120.0)},
    "wander": {"mean_hold_s": (5.0, 60.0), "pursue_share": (0.2, 0.8), "launch_fraction": (0.5, 1.0),
               "defend_tti_s": (10.0, 40.0)},
    "reply": {"reply_fraction": (0.8, 1.3), "launch_fraction": (0.5, 0.9), "crank_angle_deg": (20.0, 60.0),
              "defend_tti_s": (10.0, 40.0)},
}
"""Per training tactic, the range each parameter is drawn from (``tactic:NAME?train``)."""

HELDOUT_RANGES: dict[str, Ranges] = {
    "pump": {"launch_fraction": (0.6, 0.75), "crank_angle_deg": (20.0, 35.0), "defend_tti_s": (32.0, 40.0),
             "pump_fraction": (1.55, 1.8), "recommit_fraction": (2.2, 2.5)},
    "drag": {"launch_fraction": (0.6, 0.75), "crank_angle_deg": (20.0, 35.0), "defend_tti_s": (38.0, 50.0),
             "release_speed_mps": (250.0, 380.0)},
    "late": {"launch_fraction": (0.3, 0.4), "crank_angle_deg": (10.0, 20.0), "defend_tti_s": (15.0, 22.0)},
    "notch": {"launch_fraction": (0.6, 1.0), "beam_angle_deg": (70.0, 110.0), "defend_tti_s": (10.0, 40.0)},
    "sniper": {"no_escape_fraction": (0.7, 1.0), "cone_deg": (10.0, 30.0), "defend_tti_s": (10.0, 40.0)},
    "skate": {"launch_fraction": (0.6, 1.0), "leave_angle_deg": (110.0, 180.0), "defend_tti_s": (10.0, 40.0)},
    "herd": {"launch_fraction": (0.8, 1.0), "max_in_flight": (1.0, 3.0), "defend_tti_s": (10.0, 40.0)},
}
"""Per held-out tactic, the range each parameter is drawn from (``tactic:NAME?heldout``)."""

TRAINING: list[str] = [f"tactic:{name}?train" for name in TRAINING_RANGES]
"""The training tactics with their training ranges: what a league may use as anchors."""

HELDOUT: list[str] = [f"tactic:{name}?heldout" for name in HELDOUT_RANGES]
"""The held-out tactics with their held-out ranges: for evaluation only, never for training."""


def meets_heldout(spec: str) -> bool:
    """Whether flying against ``spec`` could show a fighter a held-out tactic or parameter value:
    a tactic held out whole, or a tactic spec with any draw but its training ranges (its
    defaults, ``?random``, ``?heldout`` or a fixed parameter). Other specs (scripted agents,
    checkpoints, league snapshots) never do. What picks among a run's checkpoints
    (``pipeline.select``) may meet only specs for which this is false, so the held-out tactics
    judge a policy that nothing chose with them."""
    body = spec.strip()
    if not body.startswith("tactic:"):
        return False
    name, _, query = body[len("tactic:"):].partition("?")
    if name not in TRAINING_RANGES:
        return name in HELDOUT_RANGES or not name  # an unknown name is refused where it is built
    return [item.strip() for item in query.split("&")] != ["train"]
