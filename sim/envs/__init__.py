"""The simulator as environments: Gymnasium, PettingZoo, and the top-down rendering."""
