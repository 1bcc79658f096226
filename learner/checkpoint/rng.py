"""The global random number generators (torch, CUDA, numpy's legacy global generator, Python's
``random``): their states as plain tensors and containers a checkpoint can hold, and the seeding
of all of them from one run seed."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def rng_state() -> dict[str, Any]:
    # The legacy global numpy RNG is what third-party code seeds and draws from; keep it too.
    np_state = np.random.get_state()  # noqa: NPY002
    if not isinstance(np_state, tuple):  # legacy=True, the default, gives the tuple form
        raise TypeError(f"numpy.random.get_state() gave a {type(np_state).__name__}, not a tuple")
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        # numpy's state holds an ndarray, which weights_only loading refuses: store it as a tensor.
        "numpy": {"key": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "python": {"version": py_version, "internal": list(py_internal), "gauss_next": py_gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    key = n["key"].cpu().numpy().astype(np.uint32)
    np.random.set_state(("MT19937", key, n["pos"], n["has_gauss"], n["cached_gaussian"]))  # noqa: NPY002
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_global_generators(seed: int) -> None:
    """Seed every global random generator a checkpoint saves under ``rng/``: torch's (the CPU's
    and every CUDA device's), numpy's legacy global one and Python's ``random``. Two runs from
    one ``config.toml`` then end with the same states, and a resume restores them from its
    checkpoint after this."""
    torch.manual_seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - the legacy global generator is the one saved
    random.seed(seed)
