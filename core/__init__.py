"""What every floor shares and that imports nothing of ours: the rollout schema (one declaration
of the fields of a chunk of experience) and plug-in loading (``package.module:Name`` specs)."""
