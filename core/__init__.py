"""What every floor shares and that imports nothing of ours: the rollout schema (one declaration
of the fields of a chunk of experience), plug-in loading (``package.module:Name`` specs), atomic
files (:mod:`core.files`) and how the command-line tools end (:mod:`core.command`)."""
