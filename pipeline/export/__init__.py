"""``python -m pipeline.export RUN --onnx OUT [--torchscript OUT]``: a trained policy leaves Python.

RUN is a run directory, a checkpoints folder or a checkpoint file (``latest.pt`` of a run
directory). Each output is one file that takes raw observations ``obs [N, D]`` float32, with the
checkpoint's observation normalization inside, and returns the deterministic action (the
policy's mode) beside the logits (discrete actions) or the standard deviation (continuous), plus
a JSON sidecar ``OUT.json``: the observation layout, what each action component means, and the
checkpoint, policy version and agent-steps it came from (:mod:`pipeline.export.sidecar`).

- ``--onnx OUT``: an ONNX model (:mod:`pipeline.export.graph`; needs the ``onnx`` package, the
  ``export`` extra), for onnxruntime and other ONNX runtimes;
- ``--torchscript OUT``: a TorchScript module for ``torch.jit.load`` (Python or LibTorch).

The checkpoint is read with the learner's checkpoint loading and every file is made before the
first is written: a missing or damaged checkpoint, a missing package or an unusable output path
is one line on stderr, exit status 2, and nothing written. Each file is written atomically
(``core.files``); an existing file of the same name is replaced, as the other commands' outputs
are. The parts: :mod:`pipeline.export.graph` (the exported module and its writers),
:mod:`pipeline.export.sidecar` (the sidecar), :mod:`pipeline.export.command` (the command line).
"""

from pipeline.export.command import main, run

__all__ = ["main", "run"]
