"""Tensors in the actor processes' messages: ``[dtype name, shape, raw bytes]`` each, so that
a message stays plain msgpack (``actors.workers.supervision.pack``)."""

from __future__ import annotations

from typing import Any

import torch

Tensors = Any  # a tensor, or a tuple of them (whatever EpisodeStats.take_env_results returns)


def tensor_to_msg(t: torch.Tensor) -> list[Any]:
    t = t.detach().to("cpu").contiguous()
    return [str(t.dtype).removeprefix("torch."), list(t.shape), t.numpy().tobytes()]


def tensor_from_msg(m: list[Any]) -> torch.Tensor:
    dtype, shape, data = m
    return torch.frombuffer(bytearray(data), dtype=getattr(torch, dtype)).reshape(shape).clone()


def results_to_msg(r: Tensors) -> list[Any]:
    return [tensor_to_msg(t) for t in r] if isinstance(r, tuple) else [tensor_to_msg(r), None]


def results_from_msg(m: list[Any]) -> Tensors:
    if len(m) == 2 and m[1] is None:
        return tensor_from_msg(m[0])
    return tuple(tensor_from_msg(x) for x in m)
