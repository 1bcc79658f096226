"""Running observation statistics, kept as module buffers so they travel with the weights."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn

from learner.distributed import all_reduce_sum_


class RunningObsNorm(nn.Module):
    """Per-component running mean and variance of observations (Chan et al. parallel merge).

    ``mean``, ``var`` (float32, used on the hot path) and ``count`` (float64) are buffers, so they
    are part of ``state_dict()`` and saved with the model. Under data parallel, :meth:`update`
    all-reduces the batch moments first, so every rank merges the same numbers and the statistics
    stay identical on all ranks.
    """

    # Buffers registered in __init__ (declared here so they type as tensors, not Tensor | Module).
    mean: Tensor
    var: Tensor
    count: Tensor

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        if dim < 1:
            raise ValueError(f"observation dim must be >= 1, got {dim}")
        self.dim = dim
        self.clip = float(clip)
        self.eps = float(eps)
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, obs: Tensor) -> Tensor:
        """Normalize ``obs [..., D]`` with the current statistics, clipped to ± clip."""
        x = (obs - self.mean) * torch.rsqrt(self.var + self.eps)
        return x.clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, obs: Tensor, sync: bool = True) -> None:
        """Merge the moments of ``obs [..., D]`` into the running statistics.

        With ``sync`` and an initialized process group of more than one rank, the batch moments
        are summed over all ranks first (every rank must call this with the same shapes).
        """
        if obs.shape[-1] != self.dim:
            raise ValueError(f"obs must have last dimension {self.dim}, got shape {tuple(obs.shape)}")
        x = obs.reshape(-1, self.dim).to(device=self.mean.device, dtype=torch.float64)
        # One flat vector [count, sum, sum of squares] so a single all-reduce covers it.
        moments = torch.cat(
            [torch.full((1,), float(x.shape[0]), dtype=torch.float64, device=x.device),
             x.sum(0), (x * x).sum(0)]
        )
        if sync and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            all_reduce_sum_(moments, "the observation statistics")
        n_b = moments[0]
        mean_b = moments[1:1 + self.dim] / n_b
        var_b = (moments[1 + self.dim:] / n_b - mean_b * mean_b).clamp_min(0.0)
        n_a = self.count
        mean_a = self.mean.double()
        var_a = self.var.double()
        total = n_a + n_b
        delta = mean_b - mean_a
        new_mean = mean_a + delta * (n_b / total)
        m2 = var_a * n_a + var_b * n_b + delta * delta * (n_a * n_b / total)
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / total)
        self.count.copy_(total)
