"""The missile's true reach: reach tables, their ground truth, threat regions and the spacetime graph's numbers."""
