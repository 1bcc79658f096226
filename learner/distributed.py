"""Data parallel for the learner through ``torch.distributed`` (gloo on CPU, NCCL on GPU).

Each rank holds a full replica, computes gradients on its own batch, and the gradients are
averaged with one all-reduce over a preallocated flat buffer per minibatch. Parameters start
identical (broadcast from rank 0) and therefore stay identical: every rank applies the same
averaged, clipped gradient with the same optimizer state.

Lifetime: :func:`init_from_env` opens the default group, :func:`shutdown` closes it and checks that
it was really released. A gloo group runs its own threads (``gloo_tcp_loop`` and two
``pt_gloo_runloop``); ``destroy_process_group`` joins them only if it drops the last reference to
the group. Some torch modules bind ``group.WORLD`` as a default argument when first imported
(``torch.distributed.nn`` among them, which the first ``torch.optim`` optimizer imports on the side
through ``torch._dynamo``). Imported after the group exists, they keep it alive, and its threads
run on into interpreter teardown. A run-loop thread that frees its last work object there (a
barrier holding the all-gather before it, whose tensors are Python-owned) needs the GIL; a
finalizing interpreter ends such a thread with ``pthread_exit`` inside a ``noexcept`` destructor,
and the process dies with SIGABRT ("terminate called without an active exception") after all its
work is done. Rare, and most likely when the machine is loaded. :func:`init_from_env` therefore
imports those modules first, while ``group.WORLD`` is still None.
"""

from __future__ import annotations

import datetime
import gc
import importlib
import os
import time
import weakref
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn

from core.command import squeezed


class CollectiveError(dist.DistError):
    """A collective of the learner failed: a peer rank died, or did not answer in time."""


def is_distributed() -> bool:
    """True when a process group with more than one rank is initialized."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """Number of ranks (1 without a process group)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


# Modules that evaluate ``group.WORLD`` in a signature at import time (torch 2.x). Imported before
# the default group exists, they bind None and hold no reference to it.
_WORLD_BINDING_MODULES = (
    "torch.distributed.nn.functional",
    "torch.distributed.optim.zero_redundancy_optimizer",
    "torch.distributed.fsdp.sharded_grad_scaler",
)


def init_from_env(device: torch.device | str = "cpu", timeout: datetime.timedelta | None = None,
                  store: dist.Store | None = None) -> bool:
    """Initialize the default process group from ``torchrun``'s environment variables.

    Does nothing and returns False when ``WORLD_SIZE`` is unset or 1, or a group already exists.
    The backend is NCCL for a CUDA ``device`` (whose index is then set from ``LOCAL_RANK``) and
    gloo otherwise; ``timeout`` bounds joining the group and every collective (torch's default
    when None). ``store``: the key-value store the ranks meet in (default: the one at
    ``MASTER_ADDR:MASTER_PORT``). Call :func:`shutdown` when the collectives are done.
    """
    if not dist.is_available() or dist.is_initialized():
        return False
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    for name in _WORLD_BINDING_MODULES:  # see the module docstring: must precede the group
        importlib.import_module(name)
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    backend = "nccl" if device.type == "cuda" else "gloo"
    if store is None:
        dist.init_process_group(backend, timeout=timeout)
    else:
        dist.init_process_group(backend, timeout=timeout, store=store, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    return True


def shutdown() -> None:
    """Destroy the default process group and check that nothing else keeps it alive.

    Every rank calls this once, after its last collective (a failing rank may call it from a
    ``finally``: destroying a gloo group talks to no peer). Without a group it does nothing.

    Raises:
        RuntimeError: the group is still referenced after ``destroy_process_group``, so its
            backend threads would outlive ``main`` and race the interpreter's teardown (see the
            module docstring).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    world = weakref.ref(dist.group.WORLD)
    dist.destroy_process_group()
    gc.collect()  # a reference cycle is no leak; only a live reference is
    if world() is not None:
        raise RuntimeError(
            "the default process group is still referenced after destroy_process_group (a module "
            "imported after init_process_group bound group.WORLD?); its backend threads would "
            "still run at interpreter exit")


@torch.no_grad()
def broadcast_module(module: nn.Module, src: int = 0) -> None:
    """Copy every parameter and buffer of ``module`` from rank ``src`` to all ranks."""
    if not is_distributed():
        return
    for tensor in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(tensor.data, src)


@dataclass
class CollectiveTimer:
    """Wall time spent in one kind of collective by this process, and how many calls it took.

    The time includes waiting for the slowest rank to arrive. On gloo (CPU) the call returns
    when the sum is done; on NCCL it returns once the collective is queued on the stream, so the
    time is the launch's, not the transfer's."""

    calls: int = 0
    seconds: float = 0.0
    elements: int = 0
    """Elements summed by the last call."""


GRADIENT_ALL_REDUCE = CollectiveTimer()
"""Every :meth:`GradientAllReducer.all_reduce` of this process: its collective alone, without
the copies into and out of the flat buffer (``bench/scale.py`` reads it)."""


class GradientAllReducer:
    """Averages the gradients of a fixed parameter list over all ranks through one flat buffer.

    The buffer is allocated once; every call copies the gradients in, all-reduces, and copies
    the mean back, so the update allocates nothing per minibatch.
    """

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = [p for p in params if p.requires_grad]
        total = sum(p.numel() for p in self.params)
        device = self.params[0].device if self.params else torch.device("cpu")
        self.flat = torch.zeros(total, device=device, dtype=torch.float32)
        self._views = []
        offset = 0
        for p in self.params:
            self._views.append(self.flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    @torch.no_grad()
    def all_reduce(self) -> None:
        """Replace each parameter's ``.grad`` by its mean over ranks (missing grads count as 0)."""
        if not is_distributed():
            return
        for p, view in zip(self.params, self._views, strict=True):
            if p.grad is None:
                view.zero_()
            else:
                view.copy_(p.grad)
        start = time.perf_counter()
        all_reduce_sum_(self.flat, "the gradients")
        GRADIENT_ALL_REDUCE.seconds += time.perf_counter() - start
        GRADIENT_ALL_REDUCE.calls += 1
        GRADIENT_ALL_REDUCE.elements = self.flat.numel()
        self.flat.div_(dist.get_world_size())
        for p, view in zip(self.params, self._views, strict=True):
            if p.grad is None:
                p.grad = view.clone()
            else:
                p.grad.copy_(view)


def all_reduce_sum_(tensor: Tensor, what: str) -> None:
    """In-place sum of ``tensor`` over ranks; :class:`CollectiveError` naming ``what`` when a
    peer is gone or the collective times out."""
    try:
        dist.all_reduce(tensor)
    except RuntimeError as exc:
        raise CollectiveError(f"summing {what} over the ranks failed: {squeezed(exc)}") from exc


def all_reduce_mean_(tensor: Tensor) -> Tensor:
    """In-place mean of ``tensor`` over ranks (identity without a process group)."""
    if is_distributed():
        all_reduce_sum_(tensor, "a statistic")
        tensor.div_(dist.get_world_size())
    return tensor
