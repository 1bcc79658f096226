"""Worker processes: the supervision mechanism every spawned child uses, and, on top of it, the
Gymnasium env workers, their protocol, and a process vector env."""
