"""Worker processes for ordinary Gymnasium envs: the worker, its protocol, and a process vector env."""
