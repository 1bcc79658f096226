"""Which environment a run trains on, and ``Midrange-v0`` built from the launcher's specs."""
