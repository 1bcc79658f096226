"""Moving data between actors and the learner: the ring of rollout slots and versioned weights."""
