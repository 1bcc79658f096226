"""Evaluation: matches between agents, confidence intervals, ratings, recorded replays."""
