"""Devices: one spelling per device, and how much memory a device has left.

``cuda`` means the current CUDA device, with its index. Tensors always report an indexed CUDA
device (``cuda:0``), so an object that stored a bare ``torch.device("cuda")`` would never
compare equal to its own tensors' device; code that checks "is this already on my device?"
would then copy on every call (a host sync on the hot path).

Memory is checked before allocating: a batch too large for the machine is refused with a
message naming both sizes, instead of allocating until the operating system kills the process.
:func:`peak_bytes` measures what a piece of code allocates by running it on the ``meta``
device (shapes only: no memory, no data), so an estimate follows the code that allocates.
"""

from __future__ import annotations

import functools
import os
import traceback
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

UNLIMITED_BYTES = 2**63 - 1
"""What :func:`available_memory_bytes` reports where nothing can run out (``meta``) or where
the amount is unknown: every check against it passes."""


def canonical_device(device: str | torch.device) -> torch.device:
    """``torch.device(device)``, with the current device's index filled in for a bare CUDA."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


# ---------------------------------------------------------------------- available memory


def available_memory_bytes(device: str | torch.device) -> int:
    """Bytes that can still be allocated on ``device``.

    - ``cpu``: ``MemAvailable`` of ``/proc/meminfo`` (free memory plus what the kernel can
      reclaim), lowered to the headroom of the process's cgroup memory limit where one is set
      (a container sees the host's ``/proc/meminfo``); without ``/proc``, the free pages from
      ``os.sysconf``.
    - ``cuda``: the driver's free memory plus what PyTorch's caching allocator holds unused.
    - ``meta``, and device types with no way to ask: :data:`UNLIMITED_BYTES`.
    """
    device = canonical_device(device)
    if device.type == "cpu":
        avail = _meminfo_available()
        if avail is None:
            avail = _sysconf_available()
        headroom = _cgroup_headroom()
        if headroom is not None:
            avail = headroom if avail is None else min(avail, headroom)
        return UNLIMITED_BYTES if avail is None else avail
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free) + int(cached)
    return UNLIMITED_BYTES


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # the kernel writes kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _sysconf_available() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # cgroup v2 writes "max" for no limit


def _stat_value(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return 0


def _cgroup_headroom() -> int | None:
    """Limit minus usage of this process's memory cgroup (v2, else v1), counting inactive page
    cache as free since the kernel reclaims it before failing; None without a limit."""
    root = Path("/sys/fs/cgroup")
    for limit_file, usage_file, stat_key, stat_dir in (
        ("memory.max", "memory.current", "inactive_file", root),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "total_inactive_file",
         root / "memory"),
    ):
        limit = _read_int(root / limit_file)
        usage = _read_int(root / usage_file)
        # cgroup v1 writes a page-rounded 2**63 for "no limit".
        if limit is None or usage is None or limit >= 2**62:
            continue
        return max(limit - usage + _stat_value(stat_dir / "memory.stat", stat_key), 0)
    return None


def format_bytes(n: int) -> str:
    """``n`` bytes for a message: ``'850 GiB'``, ``'1.5 MiB'``, ``'512 B'``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if value >= 10 or unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def require_memory(needed_bytes: int, device: str | torch.device, what: str) -> None:
    """Raise ``ValueError`` when ``needed_bytes`` exceed :func:`available_memory_bytes`, e.g.
    ``"BatchedSim(1000000000 envs) needs about 4.7 TiB, but cpu has 22 GiB available"``.

    ``what`` names the thing that would have been allocated.
    """
    device = canonical_device(device)
    available = available_memory_bytes(device)
    if needed_bytes > available:
        raise ValueError(
            f"{what} needs about {format_bytes(needed_bytes)}, but {device} has "
            f"{format_bytes(available)} available"
        )


# ---------------------------------------------------------------------- measured allocation


class AllocationTracker(TorchDispatchMode):
    """Counts the bytes of storages that tensor operations allocate while the mode is active,
    live and at peak, freeing them when the storage dies (views and in-place results share a
    storage and are not counted again).

    Run under it on the ``meta`` device, a piece of code reports the memory it would need on a
    real one without allocating any.
    """

    def __init__(self, device_type: str | None = None) -> None:
        super().__init__()
        self.device_type = device_type
        self.live = 0
        self.peak = 0
        # Storage key -> (bytes, weak reference whose callback releases them).
        self._counted: dict[int, tuple[int, weakref.ref]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        # Outputs whose schema declares an alias (views, in-place and out= results) reuse an
        # existing storage; the others are fresh allocations.
        if any(r.alias_info is not None for r in func._schema.returns):
            return out
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._count(leaf)
        return out

    def _count(self, tensor: torch.Tensor) -> None:
        if self.device_type is not None and tensor.device.type != self.device_type:
            return
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._counted:
            return
        nbytes = storage.nbytes()
        # PyTorch keeps one Python object per storage while the storage lives, so the callback
        # runs when the last tensor using the storage is gone.
        self._counted[key] = (nbytes, weakref.ref(storage, functools.partial(self._release, key)))
        self.live += nbytes
        self.peak = max(self.peak, self.live)

    def _release(self, key: int, _ref: object) -> None:
        nbytes, _ = self._counted.pop(key)
        self.live -= nbytes


def peak_bytes(fn: Callable[[], object], device_type: str | None = "meta") -> int:
    """The peak of the bytes allocated (on ``device_type``; every device if None) while
    ``fn()`` runs, counting only what it allocates itself. Run ``fn`` on the ``meta`` device
    to measure without allocating."""
    tracker = AllocationTracker(device_type)
    with tracker:
        fn()
    return tracker.peak


# ---------------------------------------------------------------------- host traffic

_SYNC_OPS = frozenset({
    "aten::_local_scalar_dense", "aten::is_nonzero", "aten::nonzero", "aten::equal",
    "aten::masked_select", "aten::_unique", "aten::_unique2", "aten::unique_dim",
    "aten::unique_consecutive", "aten::repeat_interleave",
})
"""Operators that read device data on the host (their result's size or value is needed there)."""
_COPY_OPS = frozenset({"aten::_to_copy", "aten::copy_", "aten::_copy_from"})
_FROM_HOST_DATA = frozenset({"tensor", "as_tensor", "asarray"})


class HostTraffic:
    """Records what a piece of code makes the host wait for or copy to the device: reads of
    device data (``.item()``, ``bool(t)``, ``nonzero``, boolean-mask indexing, ...), copies of
    host tensors to the device (``t.to(device)``, ``dst.copy_(cpu_t)``, a host tensor beside
    device ones in an operator), device tensors built from host data (``torch.as_tensor(0.5,
    device=...)``) and device tensors indexed with host data (``t[:, [1, 2]]``). On a GPU each
    one is a host sync or a copy from pageable memory per call, and CUDA graph capture refuses
    the copies.

    Run on the ``meta`` device, it finds them without a GPU: ``meta`` stands in for the
    accelerator, and each event names what happened and the line outside PyTorch that did it.
    The code still runs (on ``meta``, a read of device data then raises).

        with HostTraffic() as traffic:
            agent.act(obs_on_meta)
        assert not traffic.events, traffic.events
    """

    def __init__(self) -> None:
        self.events: list[str] = []
        self._modes = (_TrafficFunctions(self.events), _TrafficDispatch(self.events))

    def __enter__(self) -> HostTraffic:
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)


def _on_device(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type != "cpu"


def _host_index(index: object) -> bool:
    """Whether an index holds host data that must be copied to the device: a list, tuple or
    array of integers or booleans, or a CPU tensor, alone or inside an index tuple."""
    parts = index if isinstance(index, tuple) else (index,)
    for part in parts:
        if isinstance(part, torch.Tensor) and part.device.type == "cpu":
            return True
        if isinstance(part, list) or type(part).__module__ == "numpy":
            return True
    return False


class _Recorder:
    """A torch mode that appends what it finds to a shared list of events."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events


class _TrafficFunctions(_Recorder, TorchFunctionMode):
    """The calls that move host data to the device before any operator runs."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _FROM_HOST_DATA and args and not isinstance(args[0], torch.Tensor):
            device = kwargs.get("device")
            if device is not None and torch.device(device).type != "cpu":
                self.events.append(f"torch.{name} builds a device tensor from host data at {_caller()}")
        elif name in ("__getitem__", "__setitem__") and len(args) >= 2 and _on_device(args[0]):
            if _host_index(args[1]):
                self.events.append(f"Tensor.{name} indexes a device tensor with host data at {_caller()}")
        return func(*args, **kwargs)


class _TrafficDispatch(_Recorder, TorchDispatchMode):
    """The operators that read device data on the host or take host tensors to the device."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func._schema.name
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_device = any(t.device.type != "cpu" for t in tensors)
        reason = ""
        if name in _SYNC_OPS and on_device:
            reason = "reads device data on the host"
        elif name == "aten::index" and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool and i.device.type != "cpu"
                for i in tree_leaves(args[1:])):
            reason = "indexes with a boolean mask (its size is read on the host)"
        elif name in _COPY_OPS:
            target = kwargs.get("device") if name == "aten::_to_copy" else args[0].device
            target = torch.device(target) if target is not None else args[0].device
            sources = tensors[1:] if name == "aten::copy_" else tensors[:1]
            if target.type != "cpu" and any(t.device.type == "cpu" for t in sources):
                reason = "copies a host tensor to the device"
        elif on_device and any(t.device.type == "cpu" and t.dim() > 0 for t in tensors):
            reason = "takes a host tensor beside device tensors (a copy to the device)"
        if reason:
            self.events.append(f"{name} {reason} at {_caller()}")
        return func(*args, **kwargs)


def _caller() -> str:
    """The innermost stack frame outside torch and this module, as ``path:line in function``."""
    here = Path(__file__).resolve()
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename)
        if path.resolve() == here or "torch" in path.parts:
            continue
        return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "?"
