"""Champions: trained fighters shipped with the package, flown by name like the scripted agents.

Each is a policy-only file beside this module (the policy network, its observation layout and
the simulator it was trained on; no optimizer state), loaded and checked like any checkpoint by
``pipeline.config.specs.build_agent``: a file of another observation layout or action mode is
refused in one line naming it.

``ace``, ``ace.pt``: the final policy of a league-bench run, seed 1, 24M agent-steps, the
bench's recipe as of 2026-11-26 (``bench/learn_league.py``'s default, ``--recipe ace``: a 128×128
network, half the groups against past selves, γ 0.995, the five scripted fighters and the
tactic library's six training tactics as anchors, the pool frozen for the last third; the
launcher's endgame curriculum and ``shaped+0.5*hunt``)::

    python bench/learn_league.py --seed 1 --run-dir RUN --heldout-episodes 200
    python bench/package_champion.py RUN --name ace

Its evaluation table, wall time and device are in bench/RESULTS.md, "The champion, ace, from
the tactic-anchored league": it wins 89–100 % against five of the six held-out tactics it
never met, 95.5 % against ``random``, 88.5 % against ``crank``. It is exploitable: of three fresh
learners trained against it for 4M agent-steps each, the strongest wins 98.3 % (by running it
out of the arena with long shots; bench/RESULTS.md, "``ace`` against three exploiters"), where
the bench's single exploiter had found 1 %.

``ace2``, ``ace2.pt``: the next generation, taught by ``ace``: the final policy of a league-bench
run, seed 0, with the kickstarting teacher on (``ace``'s most likely action at each of the
learner's observations, weight 1 falling to 0 over the first quarter; everything else the
bench's recipe of ``ace``)::

    python bench/learn_league.py --seed 0 --run-dir RUN --set ppo.teacher=ace --set ppo.teacher_coef=1
    python bench/package_champion.py RUN --name ace2

It never met the held-out tactics either (nor did its teacher). Its evaluation table is in
bench/RESULTS.md, "The champion as the league's teacher: ace2": 97.5 % against ``crank``,
98.4 % against ``random``, 86–100 % against six of the seven held-out tactics and 66 % against
the seventh, ``skate`` (``ace``: 33 %); against ``ace`` itself it draws 94.5 % of its fights
(2.5 % won, 3 % lost). The strongest of three fresh learners trained against it wins 58.5 %.
It is the best of three seeds of its command: seeds 1 and 2 won 87.5–97.0 % against ``crank``,
42–54 % against the weakest held-out tactic, and their strongest exploiters 92.5–95.3 % (bench/RESULTS.md,
"The same recipe on two more seeds").

``ace3``, ``ace3.pt``: the fighter of ``--recipe pressed`` on seed 6, taught its flying by
``ace`` for three quarters of the run (the best of that recipe's four seeds, not what the recipe
gives)::

    python bench/learn_league.py --recipe pressed --seed 6 --run-dir RUN
    python bench/package_champion.py RUN --name ace3

It reads the reach block and a 20-second trace (``sim.obs_reach = true``, ``sim.obs_trace_s =
20``), so it flies only a simulator with both: the evaluator and the cockpit give it its own
(``pipeline.evaluation.entrants.trained_sim_config``), a simulator without them refuses it in one
line. Its evaluation table is in bench/RESULTS.md, "The champion ace3": 99.7 % against
``crank``, 92.9 % against ``random`` (every loss to a ``random`` missile at short range), 88–100 %
against all seven held-out tactics (``skate`` 88.2 %, ``herd`` 89.7 %); the strongest of three
fresh learners trained against it wins 33 % of its fights.

``ace4``, ``ace4.pt``: the fighter of ``--recipe tutored`` on seed 4, taught by ``ace3`` at full
weight for the whole run with the wandering tactic among its anchors (the one of that recipe's
three seeds whose final policy was first in its round robin)::

    python bench/learn_league.py --recipe tutored --seed 4 --run-dir RUN
    python bench/package_champion.py RUN --name ace4

Like ``ace3`` it reads the reach block and a 20-second trace. Its evaluation table is in
bench/RESULTS.md, "The champion ace4": 99.9 % against ``crank``, 96.5 % against ``random``,
88–100 % against all seven held-out tactics (``skate`` 87.7 %, ``herd`` 93.0 %); the strongest of
three fresh learners trained against it wins 69.5 % of its fights.

``ace5``, ``ace5.pt``: the fighter of ``--recipe sparring`` on seed 3 (``tutored`` with a quarter
of the opponents past selves; of that recipe's three seeds the one with the highest lowest
held-out rate, not what the recipe gives)::

    python bench/learn_league.py --recipe sparring --seed 3 --run-dir RUN
    python bench/package_champion.py RUN --name ace5

It reads what ``ace3`` reads. Its evaluation table is in bench/RESULTS.md, "The champion ace5":
99.5 % against ``crank``, 96.5 % against ``random``, 90.5–100 % against all seven held-out
tactics, first in its round robin; the strongest of three fresh learners trained against it
wins 24.0 % of its fights, and ``ace2`` beats it in 21 of 100 (79 drawn).

``ace6``, ``ace6.pt``: the fighter of ``--recipe guarded`` on seed 3 (``sparring`` with the
teacher left out where an enemy missile is under 15 s from impact; of that recipe's four seeds
the one with the highest lowest held-out rate, not what the recipe gives)::

    python bench/learn_league.py --recipe guarded --seed 3 --run-dir RUN
    python bench/package_champion.py RUN --name ace6

It reads what ``ace3`` reads. Its evaluation table is in bench/RESULTS.md, "The champion ace6":
99.6 % against ``crank``, 99.0 % against ``random``, 91.2–100 % against all seven held-out
tactics, first in its round robin; the strongest of three fresh learners trained against it
wins 31.2 % of its fights.
"""

from __future__ import annotations

from pathlib import Path

CHAMPIONS: dict[str, Path] = {
    "ace": Path(__file__).with_name("ace.pt"),
    "ace2": Path(__file__).with_name("ace2.pt"),
    "ace3": Path(__file__).with_name("ace3.pt"),
    "ace4": Path(__file__).with_name("ace4.pt"),
    "ace5": Path(__file__).with_name("ace5.pt"),
    "ace6": Path(__file__).with_name("ace6.pt"),
}
"""The packaged policy file of each champion, by name."""
