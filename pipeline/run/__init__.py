"""A training run: the loops and their scheduling, the parts they use, actor processes, progress, the run directory."""
