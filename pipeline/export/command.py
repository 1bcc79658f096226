"""The command line of ``python -m pipeline.export`` (see :mod:`pipeline.export`)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.command import CommandParser, run_command
from core.files import write_bytes_atomic, write_text_atomic
from learner.checkpoint import (
    CheckpointError,
    load_policy,
    read_checkpoint,
    resolve_checkpoint_path,
)
from learner.network import ActorCritic
from pipeline.drawing.report import say
from pipeline.evaluation.checks import check_writable
from pipeline.export.graph import ONNX_OPSET, ExportedPolicy, onnx_bytes, torchscript_bytes
from pipeline.export.sidecar import describe, sidecar_path

EXPORT_EXTRA = "pip install 'midrange-rl[export]'"
READ_ATTEMPTS = 3
"""How often a checkpoint that changes while it is read (a running training replacing
``latest.pt``) is read again before the export gives up."""


@dataclass(frozen=True)
class Format:
    """One kind of exported file."""

    flag: str
    name: str
    """As the sidecar's ``file_format`` names it."""
    requires: tuple[str, ...]
    """Python packages it needs besides torch."""
    write: Callable[[ExportedPolicy, int], bytes]
    """The file's bytes for the module and the observation size."""
    opset: int | None = None

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-")


FORMATS = (
    Format("--onnx", "onnx", ("onnx",), onnx_bytes, ONNX_OPSET),
    Format("--torchscript", "torchscript", (), lambda module, _obs_dim: torchscript_bytes(module)),
)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m pipeline.export``."""
    p = CommandParser(prog="python -m pipeline.export", allow_abbrev=False,
                      description="Write a trained policy as ONNX or TorchScript, observation "
                                  "normalization included, with a JSON sidecar.")
    p.add_argument("run", type=Path, metavar="RUN",
                   help="a run directory, a checkpoints folder or a checkpoint file")
    p.add_argument("--onnx", type=Path, metavar="OUT",
                   help=f"write an ONNX model (opset {ONNX_OPSET}) and OUT.json (needs onnx: {EXPORT_EXTRA})")
    p.add_argument("--torchscript", type=Path, metavar="OUT",
                   help="write a TorchScript module (torch.jit.load reads it) and OUT.json")
    return p


def load_exportable(checkpoint: Path) -> tuple[ActorCritic, dict[str, Any]]:
    """The policy of ``checkpoint`` and the checkpoint's contents, both from the same file: a
    checkpoint replaced between the two reads (a run writing its next one) is read again."""
    for _ in range(READ_ATTEMPTS):
        state = read_checkpoint(checkpoint)
        policy = load_policy(checkpoint)
        if policy.policy_version == int(state["policy_version"]):
            break
    else:
        raise CheckpointError(f"checkpoint {checkpoint} changed each time it was read (a run is "
                              "writing it); name one of its numbered checkpoints instead")
    layout = state.get("obs_layout")
    size = layout.get("size") if isinstance(layout, dict) else None
    if size is not None and size != policy.obs_dim:
        raise CheckpointError(f"checkpoint {checkpoint} is inconsistent: its observation layout "
                              f"has {size} components, its network takes {policy.obs_dim}")
    return policy, state


def _check_outputs(wanted: list[tuple[Format, Path]], checkpoint: Path) -> None:
    """Refuse, before the checkpoint is read, outputs that would overwrite each other or the
    checkpoint, or that cannot be written."""
    seen: dict[Path, str] = {checkpoint.resolve(): f"the checkpoint {checkpoint}"}
    for fmt, path in wanted:
        sidecar = sidecar_path(path)
        for target, what, label in ((path, f"{fmt.flag} {path}", f"the {fmt.flag} output"),
                                    (sidecar, f"{fmt.flag} {path}: its sidecar {sidecar}",
                                     f"the sidecar of {fmt.flag}")):
            key = target.resolve()
            if key in seen:
                raise ValueError(f"{what} would overwrite {seen[key]}; give another file name")
            seen[key] = label
        check_writable(path, fmt.flag)


def main(argv: list[str] | None = None) -> dict[str, Path]:
    """Export as asked; returns ``{flag: path}`` of the files written (each with its sidecar)."""
    args = build_parser().parse_args(argv)
    wanted = [(fmt, getattr(args, fmt.dest)) for fmt in FORMATS if getattr(args, fmt.dest) is not None]
    if not wanted:
        raise ValueError("nothing to write: give --onnx OUT and/or --torchscript OUT")
    for fmt, _ in wanted:
        for module in fmt.requires:
            if importlib.util.find_spec(module) is None:
                raise ImportError(f"{fmt.flag} needs the Python package {module!r}: {EXPORT_EXTRA}")
    checkpoint = resolve_checkpoint_path(args.run)
    _check_outputs(wanted, checkpoint)
    policy, state = load_exportable(checkpoint)
    graph = ExportedPolicy(policy)
    # Every file is made before the first is written: a failure leaves nothing behind.
    files: list[tuple[Format, Path, bytes, str]] = []
    for fmt, path in wanted:
        data = fmt.write(graph, policy.obs_dim)
        sidecar = describe(graph, policy, state, checkpoint, path, fmt.name, fmt.opset)
        files.append((fmt, path, data, json.dumps(sidecar, indent=2, ensure_ascii=False) + "\n"))
    steps = state.get("extra", {}).get("agent_steps")
    spec = policy.action_spec
    action = (f"action [N, {spec.dim}] int64 ({spec.kind} {','.join(map(str, spec.nvec))})"
              if spec.is_discrete else f"action [N, {spec.dim}] float32 (continuous mean)")
    say(f"checkpoint {checkpoint}: policy version {policy.policy_version}"
        + (f", {steps:,} agent-steps" if isinstance(steps, int) else "")
        + f"; obs [N, {policy.obs_dim}] float32 -> {action}")
    for fmt, path, data, text in files:
        write_bytes_atomic(path, data)
        write_text_atomic(sidecar_path(path), text)
        opset = f", opset {fmt.opset}" if fmt.opset is not None else ""
        say(f"wrote {path} ({fmt.name}{opset}, {len(data):,} bytes) and {sidecar_path(path)}")
    return {fmt.flag: path for fmt, path, _, _ in files}


def run(argv: list[str] | None = None) -> None:
    """Command-line entry: bad input (a missing or damaged checkpoint, a missing package, an
    unusable output path) is one line on stderr and exit status 2, with nothing written; a
    failed write is one line and status 1."""
    run_command(main, argv, (ValueError, ImportError))
