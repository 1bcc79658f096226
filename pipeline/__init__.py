"""Wiring of a training run: configuration, the rollout ring, weight publication, the async and
sync loops, and the ``python -m pipeline.launch`` entry point (see docs in each module)."""
