"""Evaluation: matches between agents (:mod:`~pipeline.evaluation.matches`), Wilson intervals
(:mod:`~pipeline.evaluation.intervals`), Bradley–Terry ratings (:mod:`~pipeline.evaluation.ratings`),
tables, entrants, input checks, recorded replays and returns on Gymnasium envs."""
