"""The scalar reference simulator: one environment in plain Python floats, its observation and a Gymnasium env."""
