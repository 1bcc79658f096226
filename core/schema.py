"""The rollout schema: the one declaration of what a chunk of experience holds.

A chunk is T decision steps × B environments. Every field is declared once, in
:data:`ROLLOUT_FIELDS`, with its name, its shape after the leading ``[T, B]`` (or ``[B]``), its
kind (which fixes the dtype) and its role:

- ``step`` fields have one row per decision step, ``[T, B, *suffix]``; an actor writes row ``t``
  from the decision step's record (:attr:`RolloutField.source` names the record's attribute);
- ``chunk_end`` fields have one value per environment after the last step, ``[B, *suffix]``.

Everything that holds rollouts is derived from this declaration: ring slots, the learner's
batch, an actor's step targets and staging twin, the CUDA-graph static buffers, the debug magic
fill and its check, byte counts and validation. Adding a field is one edit here (plus, if its
source is new, the attribute on the actor's step record).

Storage: :meth:`RolloutSpec.allocate` carves every field out of one byte block (fields 64-byte
aligned), so a slot is one allocation: one pin, one shared-memory segment (one file descriptor),
one copy when a staged chunk moves between devices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

KINDS = ("float", "action", "flag", "int")
"""Field kinds: ``float`` (the spec's float dtype), ``action`` (int64 for discrete action kinds,
float for continuous), ``flag`` (bool, stored as bytes so a debug fill can be neither true nor
false), ``int`` (int64)."""
ROLES = ("step", "chunk_end")
SYMBOLS = ("obs_dim", "action_dim")
"""Names a field's shape suffix may use; :class:`RolloutSpec` gives their sizes."""

MAGIC_FLOAT = -7.25e37
"""Debug fill of float fields: far outside anything a policy or the sim produces."""
MAGIC_INT = -0x5A5A5A5A5A5A5A5A
"""Debug fill of int64 fields."""
MAGIC_BYTE = 0xA5
"""Debug fill of the bytes behind flag fields (neither 0 nor 1)."""
ALIGN_BYTES = 64
"""Alignment of every field inside a chunk's byte block (a cache line; vector loads)."""


@dataclass(frozen=True)
class RolloutField:
    """One field of a rollout chunk."""

    name: str
    """Attribute name on slots and batches (``slot.obs``, ``batch.rewards``)."""
    kind: str
    """One of :data:`KINDS`; fixes the dtype."""
    suffix: tuple[str | int, ...] = ()
    """Shape after ``[T, B]`` / ``[B]``: integers or names from :data:`SYMBOLS`."""
    role: str = "step"
    """``step``: ``[T, B, *suffix]``, one row per decision step; ``chunk_end``: ``[B, *suffix]``."""
    source: str = ""
    """Dotted attribute of the actor's decision-step record a ``step`` field is copied from
    (e.g. ``result.terminated``); empty for ``chunk_end`` fields, which the actor writes itself."""
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"rollout field name must be an identifier, got {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"field {self.name}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.role not in ROLES:
            raise ValueError(f"field {self.name}: role must be one of {ROLES}, got {self.role!r}")
        for s in self.suffix:
            if not (isinstance(s, int) and s >= 1) and s not in SYMBOLS:
                raise ValueError(f"field {self.name}: shape entries must be ints >= 1 or one of "
                                 f"{SYMBOLS}, got {s!r}")
        if self.role == "step" and not self.source:
            raise ValueError(f"field {self.name}: a step field needs a source")

    @property
    def per_step(self) -> bool:
        """Whether the field has a row per decision step."""
        return self.role == "step"

    def read(self, record: Any) -> Tensor:
        """This field's value in a decision-step record (follows :attr:`source`)."""
        value = record
        for part in self.source.split("."):
            value = getattr(value, part)
        return value


ROLLOUT_FIELDS: tuple[RolloutField, ...] = (
    RolloutField("obs", "float", ("obs_dim",), source="obs",
                 doc="the learning side's observation before the step"),
    RolloutField("actions", "action", ("action_dim",), source="actions", doc="the action taken"),
    RolloutField("log_probs", "float", source="log_probs", doc="behaviour log-probability of it"),
    RolloutField("values", "float", source="values", doc="behaviour value estimate of obs"),
    RolloutField("rewards", "float", source="rewards", doc="the reward plug-in's reward"),
    RolloutField("terminated", "flag", source="result.terminated",
                 doc="the episode ended by the task at this step (no bootstrap)"),
    RolloutField("truncated", "flag", source="result.truncated",
                 doc="the episode was cut off (time limit) at this step (bootstrap)"),
    RolloutField("bootstrap_values", "float", source="bootstrap_values",
                 doc="value of the final observation where truncated, 0 elsewhere"),
    RolloutField("next_values", "float", role="chunk_end",
                 doc="value of the observation after the last step"),
)
"""The default schema. :func:`rollout_fields` reads it at call time, so a test may extend it."""


def rollout_fields() -> tuple[RolloutField, ...]:
    """The current schema (the module-level :data:`ROLLOUT_FIELDS`)."""
    return ROLLOUT_FIELDS


def _positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"RolloutSpec.{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class RolloutSpec:
    """Sizes and dtypes of one chunk, and the fields it holds."""

    rollout_len: int
    """T: decision steps per chunk."""
    num_envs: int
    """B: environments (learning fighters) per chunk."""
    obs_dim: int
    """D: observation size."""
    action_dim: int
    """A: action components per decision."""
    action_dtype: torch.dtype = torch.int64
    """int64 for discrete kinds, a float type for continuous actions."""
    float_dtype: torch.dtype = torch.float32
    """dtype of ``float`` fields."""
    fields: tuple[RolloutField, ...] = field(default_factory=rollout_fields)

    def __post_init__(self) -> None:
        for name in ("rollout_len", "num_envs", "obs_dim", "action_dim"):
            _positive_int(name, getattr(self, name))
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"rollout fields must have distinct names, got {names}")

    @property
    def samples(self) -> int:
        """Agent-steps in one chunk (T × B)."""
        return self.rollout_len * self.num_envs

    def difference(self, other: RolloutSpec) -> str:
        """What differs between two specs, e.g. ``rollout_len 8 != 9`` ("" if nothing)."""
        diffs = [f"{name} {getattr(self, name)} != {getattr(other, name)}"
                 for name in ("rollout_len", "num_envs", "obs_dim", "action_dim", "action_dtype",
                              "float_dtype") if getattr(self, name) != getattr(other, name)]
        if self.fields != other.fields:
            diffs.append(f"fields {[f.name for f in self.fields]} != {[f.name for f in other.fields]}")
        return ", ".join(diffs)

    @property
    def step_fields(self) -> tuple[RolloutField, ...]:
        """Fields with a row per decision step."""
        return tuple(f for f in self.fields if f.per_step)

    def dtype(self, f: RolloutField) -> torch.dtype:
        """The dtype of field ``f``."""
        return {"float": self.float_dtype, "action": self.action_dtype, "flag": torch.bool,
                "int": torch.int64}[f.kind]

    def suffix(self, f: RolloutField) -> tuple[int, ...]:
        """The shape of ``f`` after its leading ``[T, B]`` / ``[B]``."""
        sizes = {"obs_dim": self.obs_dim, "action_dim": self.action_dim}
        return tuple(s if isinstance(s, int) else sizes[s] for s in f.suffix)

    def shape(self, f: RolloutField, envs: int | None = None, steps: int | None = None) -> tuple[int, ...]:
        """Full shape of ``f`` for ``envs`` columns (default B) and ``steps`` rows (default T)."""
        b = self.num_envs if envs is None else envs
        t = self.rollout_len if steps is None else steps
        return ((t, b) if f.per_step else (b,)) + self.suffix(f)

    def nbytes(self, envs: int | None = None) -> int:
        """Bytes of one chunk's byte block (alignment padding included)."""
        return _layout(self, envs)[1]

    def allocate(self, device: torch.device | str = "cpu", *, envs: int | None = None,
                 pin: bool = False, share: bool = False) -> Rollout:
        """A zeroed chunk of ``envs`` columns (default B) in one byte block on ``device``;
        ``pin``: page-locked host memory, ``share``: a shared-memory segment."""
        block = torch.zeros(self.nbytes(envs), dtype=torch.uint8, device=device)
        if pin:
            block = block.pin_memory()
        elif share:
            block.share_memory_()
        return Rollout(self, self.views(block, envs), block)

    def views(self, block: Tensor, envs: int | None = None) -> dict[str, Tensor]:
        """Every field as a view into ``block``, a chunk's byte block laid out by this spec (one
        allocated here, or the same block seen from another process)."""
        offsets, total = _layout(self, envs)
        if block.dtype != torch.uint8 or block.dim() != 1 or block.numel() != total:
            raise ValueError(f"a chunk's block must be {total} uint8 bytes, got {block.dtype} of shape "
                             f"{tuple(block.shape)}")
        tensors: dict[str, Tensor] = {}
        for f in self.fields:
            shape = self.shape(f, envs)
            dtype = self.dtype(f)
            size = math.prod(shape) * _itemsize(dtype)
            raw = block[offsets[f.name] : offsets[f.name] + size]
            tensors[f.name] = raw.view(dtype).view(shape)
        return tensors

    def allocate_step(self, device: torch.device | str = "cpu") -> dict[str, Tensor]:
        """One decision step's worth of every step field, ``[B, *suffix]`` (graph buffers)."""
        return {f.name: torch.zeros((self.num_envs, *self.suffix(f)), dtype=self.dtype(f), device=device)
                for f in self.step_fields}


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _layout(spec: RolloutSpec, envs: int | None) -> tuple[dict[str, int], int]:
    offsets: dict[str, int] = {}
    at = 0
    for f in spec.fields:
        offsets[f.name] = at
        size = math.prod(spec.shape(f, envs)) * _itemsize(spec.dtype(f))
        at += -(-size // ALIGN_BYTES) * ALIGN_BYTES
    return offsets, max(at, ALIGN_BYTES)


class Rollout:
    """The tensors of one chunk (or of a batch of chunks side by side) by field name.

    Attribute access (``rollout.obs``) and item access (``rollout["obs"]``); :meth:`tensors`
    gives them all. (Not a ``Mapping``: a field is called ``values``.) The tensors are views
    into :attr:`block`; they are written in place, never rebound.
    """

    def __init__(self, spec: RolloutSpec, tensors: dict[str, Tensor], block: Tensor | None = None):
        self.spec = spec
        self._tensors = tensors
        self.block = block
        """The byte block behind every field (None for a rollout of views, e.g. a short batch)."""

    def __getitem__(self, name: str) -> Tensor:
        return self._tensors[name]

    def names(self) -> tuple[str, ...]:
        """Field names, in schema order."""
        return tuple(self._tensors)

    def tensors(self) -> dict[str, Tensor]:
        """Every field's tensor by name (a new dict of the same tensors)."""
        return dict(self._tensors)

    def __getattr__(self, name: str) -> Tensor:
        tensors = self.__dict__.get("_tensors")
        if tensors is not None and name in tensors:
            return tensors[name]
        raise AttributeError(f"{type(self).__name__} has no field or attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        tensors = self.__dict__.get("_tensors")
        if tensors is not None and name in tensors:
            tensors[name] = value  # a field is rebound in the mapping, not shadowed
        else:
            object.__setattr__(self, name, value)

    @property
    def device(self) -> torch.device:
        """Where the tensors live."""
        return next(iter(self._tensors.values())).device

    def row(self, t: int) -> dict[str, Tensor]:
        """Row ``t`` of every step field, by name (views)."""
        return {f.name: self._tensors[f.name][t] for f in self.spec.step_fields}

    def columns(self, cols: slice) -> dict[str, Tensor]:
        """Columns ``cols`` of every field, by name (views)."""
        return {f.name: self._tensors[f.name][:, cols] if f.per_step else self._tensors[f.name][cols]
                for f in self.spec.fields}

    def copy_(self, src: Rollout, non_blocking: bool = False) -> None:
        """Copy every field from ``src`` (same spec): one block copy when both have one."""
        if self.block is not None and src.block is not None and self.block.numel() == src.block.numel():
            self.block.copy_(src.block, non_blocking=non_blocking)
            return
        for name, t in self._tensors.items():
            t.copy_(src[name], non_blocking=non_blocking)

    def copy_columns_(self, src: Rollout, cols: slice, non_blocking: bool = False) -> None:
        """Copy ``src``'s fields into columns ``cols`` of this (wider) rollout."""
        for name, dst in self.columns(cols).items():
            dst.copy_(src[name], non_blocking=non_blocking)

    def nbytes(self) -> int:
        """Bytes of tensor storage (the block, or the fields' bytes for a view rollout)."""
        if self.block is not None:
            return self.block.numel()
        return sum(t.numel() * t.element_size() for t in self._tensors.values())

    def fill_magic(self) -> None:
        """Overwrite every field with the debug magic value of its kind."""
        for f in self.spec.fields:
            t = self._tensors[f.name]
            if t.dtype == torch.bool:
                t.view(torch.uint8).fill_(MAGIC_BYTE)
            elif t.is_floating_point():
                t.fill_(MAGIC_FLOAT)
            else:
                t.fill_(MAGIC_INT)

    def unwritten_fields(self) -> list[str]:
        """Names of fields still holding the magic value anywhere (a host sync: debug only)."""
        bad = []
        for f in self.spec.fields:
            t = self._tensors[f.name]
            if t.dtype == torch.bool:
                hit = (t.view(torch.uint8) == MAGIC_BYTE).any()
            elif t.is_floating_point():
                hit = (t == torch.tensor(MAGIC_FLOAT, dtype=t.dtype)).any()
            else:
                hit = (t == MAGIC_INT).any()
            if bool(hit):
                bad.append(f.name)
        return bad


def check_rollout(tensors: Mapping[str, Tensor], fields: tuple[RolloutField, ...] | None = None,
                  obs_dim: int | None = None, action_dim: int | None = None) -> tuple[int, int]:
    """Check ``tensors`` hold exactly the schema's fields with consistent shapes, dtypes and one
    device; returns ``(T, B)``. Raises ``ValueError`` naming the first bad field."""
    fields = rollout_fields() if fields is None else fields
    names = {f.name for f in fields}
    missing, extra = sorted(names - set(tensors)), sorted(set(tensors) - names)
    if missing or extra:
        raise ValueError(f"rollout fields differ from the schema: missing {missing}, unexpected {extra}")
    obs = tensors["obs"] if "obs" in tensors else next(iter(tensors.values()))
    if obs.dim() < 2:
        raise ValueError(f"obs must have shape (T, B, D), got {tuple(obs.shape)}")
    t, b = int(obs.shape[0]), int(obs.shape[1])
    sizes: dict[str, int | None] = {"obs_dim": obs_dim, "action_dim": action_dim}
    for f in fields:
        value = tensors[f.name]
        if not isinstance(value, Tensor):
            raise ValueError(f"{f.name} must be a tensor, got {type(value).__name__}")
        lead = (t, b) if f.per_step else (b,)
        suffix: list[int] = []
        for s in f.suffix:
            if isinstance(s, int):
                suffix.append(s)
                continue
            have = value.shape[len(lead) + len(suffix)] if value.dim() > len(lead) + len(suffix) else -1
            if sizes[s] is None:
                sizes[s] = int(have)
            suffix.append(int(sizes[s]))  # type: ignore[arg-type]
        want = lead + tuple(suffix)
        if tuple(value.shape) != want:
            names_ = ("T", "B") if f.per_step else ("B",)
            shown = ", ".join([*names_, *(str(s) for s in f.suffix)])
            raise ValueError(f"{f.name} must have shape ({shown}) = {want}, got {tuple(value.shape)}")
        if value.device != obs.device:
            raise ValueError(f"{f.name} is on {value.device} but obs is on {obs.device}")
        ok = {"float": value.is_floating_point(), "flag": value.dtype == torch.bool,
              "int": value.dtype == torch.int64,
              "action": value.dtype == torch.int64 or value.is_floating_point()}[f.kind]
        if not ok:
            want_dtype = {"float": "floating point", "flag": "bool", "int": "int64",
                          "action": "int64 or floating point"}[f.kind]
            raise ValueError(f"{f.name} must be {want_dtype}, got {value.dtype}")
    return t, b
