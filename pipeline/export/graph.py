"""The exported graph: a trained policy's deterministic decision as one module that takes raw
observations, and the writers that save it as ONNX or TorchScript."""

import copy
import io
import tempfile
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from learner.network import ActorCritic

ONNX_OPSET = 17
"""The ONNX operator set the graph is written with (onnxruntime 1.12 and later run it)."""
INPUT_NAME = "obs"
"""The graph's one input: raw observations ``[N, D]`` float32."""


class ExportedPolicy(nn.Module):
    """The policy's mode for raw observations ``obs [N, D]`` (float32), with the observation
    normalization of the checkpoint in the graph.

    The normalization is the one :class:`learner.normalization.RunningObsNorm` applies, with its
    statistics frozen as constants: ``(obs - mean) * rsqrt(var + eps)``, clipped to ``± clip``
    (the factor computed once here, by the same operation the policy computes it with). Then
    the policy head; for a mirrored policy (``ppo.mirror``) the head of the observation and of
    its mirror image, combined as :meth:`learner.ActorCritic.forward` combines them. Returns two
    tensors:

    - discrete kinds: the action ``[N, A]`` int64 (each component's most likely choice, the first
      one on a tie, as :meth:`learner.ActorCritic.act` takes it) and the logits
      ``[N, sum(nvec)]`` float32, the components' logits one after the other;
    - continuous: the action ``[N, A]`` float32 (the Gaussian's mean, unclipped: the env clips
      it to its bounds) and the standard deviation ``[N, A]`` float32 the policy samples with.
    """

    # Declared in the class body so that torch.jit.script types them (and mypy the buffers);
    # evaluated, not postponed (no ``from __future__ import annotations`` here), for the same reason.
    obs_mean: Tensor
    obs_scale: Tensor
    action_std: Tensor
    normalize: bool
    clip: float
    discrete: bool
    splits: list[int]
    mirrored: bool
    mirror_obs_sign: Tensor
    mirror_perm: Tensor
    mirror_head_sign: Tensor

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        norm = policy.obs_norm
        with torch.no_grad():
            mean = norm.mean.detach().float().cpu().clone()
            scale = torch.rsqrt(norm.var.detach().float().cpu() + norm.eps)
            std = (torch.exp(policy.log_std.detach().float().cpu()) if policy.log_std is not None
                   else torch.zeros(0))
        self.register_buffer("obs_mean", mean)
        self.register_buffer("obs_scale", scale)
        self.register_buffer("action_std", std)
        self.normalize = policy.normalize_obs
        self.clip = norm.clip
        self.discrete = policy.action_spec.is_discrete
        self.splits = list(policy.action_spec.nvec)
        self.mirrored = policy.mirror is not None
        mirror = policy.mirror or {"obs_sign": [], "perm": [], "sign": []}
        self.register_buffer("mirror_obs_sign", torch.tensor(mirror["obs_sign"], dtype=torch.float32))
        self.register_buffer("mirror_perm", torch.tensor(mirror["perm"], dtype=torch.int64))
        self.register_buffer("mirror_head_sign", torch.tensor(mirror["sign"], dtype=torch.float32))
        self.actor = copy.deepcopy(policy.actor).cpu().eval()
        for p in self.actor.parameters():
            p.requires_grad_(False)

    def _head(self, obs: Tensor) -> Tensor:
        x = obs
        if self.normalize:
            x = ((obs - self.obs_mean) * self.obs_scale).clamp(-self.clip, self.clip)
        return self.actor(x).float()

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        head = self._head(obs)
        if self.mirrored:
            mirrored = self._head(obs * self.mirror_obs_sign).index_select(1, self.mirror_perm)
            head = 0.5 * (head + mirrored * self.mirror_head_sign)
        if self.discrete:
            parts = [logits.argmax(-1) for logits in head.split(self.splits, dim=-1)]
            return torch.stack(parts, dim=-1), head
        return head, self.action_std.expand(head.shape[0], -1)

    def output_names(self) -> tuple[str, str]:
        """The graph's outputs: ``("action", "logits")`` or ``("action", "std")``."""
        return ("action", "logits") if self.discrete else ("action", "std")


def onnx_bytes(module: ExportedPolicy, obs_dim: int) -> bytes:
    """``module`` as an ONNX model (opset :data:`ONNX_OPSET`) whose batch dimension ``N`` is
    free. Written by PyTorch's TorchScript-based exporter, which needs the ``onnx`` package and
    nothing else."""
    names = module.output_names()
    example = torch.zeros(2, obs_dim, dtype=torch.float32)
    with tempfile.TemporaryDirectory(prefix="midrange-export-") as folder, warnings.catch_warnings():
        # The TorchScript-based exporter is deprecated in favour of the torch.export one, which
        # needs onnxscript as well; this one writes the same small graph.
        warnings.simplefilter("ignore", DeprecationWarning)
        path = Path(folder) / "policy.onnx"
        torch.onnx.export(
            module, (example,), path, dynamo=False, opset_version=ONNX_OPSET,
            input_names=[INPUT_NAME], output_names=list(names),
            dynamic_axes={name: {0: "N"} for name in (INPUT_NAME, *names)},
        )
        return path.read_bytes()


def torchscript_bytes(module: ExportedPolicy) -> bytes:
    """``module`` compiled by ``torch.jit.script`` and saved as ``torch.jit.save`` writes it
    (``torch.jit.load`` reads it back, in Python or in C++ with LibTorch)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # TorchScript is deprecated in favour of torch.export, whose files LibTorch and
        # torch.jit.load cannot read; this is still the format they load.
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(module), buffer)
    return buffer.getvalue()

