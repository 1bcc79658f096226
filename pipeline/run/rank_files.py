"""A job resumed on machines that share no filesystem: the run reaches every rank.

Under ``torchrun`` every rank reads its options itself, and ``--resume RUN`` (or, in a job that
``torchrun --max-restarts`` restarted, its ``--run-dir``) names files that only one machine
may hold: ``RUN/config.toml``, the checkpoint to continue and the league's state. Before any
config is read, every rank says in ``torchrun``'s store (the one the ranks met in,
:func:`pipeline.run.ranks.attempt_store`) whether its machine holds the run; the first rank
that does packs what a resume reads and puts it there, and a rank whose machine lacks the run
unpacks it into a private temporary folder and resumes from there under the sender's names, so
every rank resolves the same config and the job goes on as one. A rank that has the run (one
machine, or a shared filesystem) reads its own files, as a single process does. Rank 0 writes
the continued run in its own ``--run-dir``: on the machine that held the run, the same folder;
on another, a new one holding the run from the resumed checkpoint on.
"""

from __future__ import annotations

import datetime
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from core.command import squeezed
from learner.checkpoint import (
    CHECKPOINTS_DIR,
    CheckpointError,
    list_checkpoints,
    resolve_checkpoint_path,
)
from pipeline.config import ConfigError
from pipeline.config.flags import build_parser, parse_config
from pipeline.league.state import STATE_FILE
from pipeline.run.ranks import attempt_store, collective_timeout_s, env_int
from pipeline.run.rundir import run_dir_of

KEY = "resumed_run"
"""The store key (under the attempt's prefix) of the packed run."""
COPY_PREFIX = "midrange-resume-"
"""The name of a rank's private copy of the run starts with this (in the temp folder)."""


@dataclass
class ResumeCopy:
    """This rank's copy of another rank's run (:func:`parse_rank_config`); :meth:`remove` deletes it."""

    root: Path
    resume_from: Path
    """Where this rank reads what ``run.resume`` names."""

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def pack_run(target: str) -> dict[str, Any]:
    """What a resume from ``target`` (a run directory, a checkpoint in one, or a bare
    checkpoint file) reads, as ``{"files": {relative path: bytes}, "resume_rel": path of
    ``target`` relative to the packed root}``; no files when ``target`` holds nothing to resume."""
    root = run_dir_of(target)
    if root is None:
        try:
            file = resolve_checkpoint_path(target)
        except CheckpointError:
            return {"files": {}, "resume_rel": ""}
        return {"files": {file.name: file.read_bytes()}, "resume_rel": file.name}
    wanted: list[Path] = [root / "config.toml"]
    checkpoints = root / CHECKPOINTS_DIR
    try:
        wanted.append(resolve_checkpoint_path(target))
        wanted.append(resolve_checkpoint_path(checkpoints))  # the newest: the league's limits
    except CheckpointError:
        pass  # a run without a checkpoint yet starts from the beginning
    league = root / "league"
    if league.is_dir():
        wanted += [league / STATE_FILE, *list_checkpoints(league)]
    files = {str(p.relative_to(root)): p.read_bytes() for p in dict.fromkeys(wanted) if p.is_file()}
    resume_rel = os.path.relpath(Path(target).resolve(), root.resolve())
    return {"files": files, "resume_rel": "" if resume_rel == "." else resume_rel}


def unpack_run(packed: Mapping[str, Any]) -> ResumeCopy:
    """Write a packed run into a new private folder; refuses paths that leave it."""
    root = Path(tempfile.mkdtemp(prefix=COPY_PREFIX))
    try:
        for rel, data in packed["files"].items():
            path = (root / rel).resolve()
            if root.resolve() not in path.parents:
                raise ConfigError(f"a rank sent a run file outside the run: {rel!r}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return ResumeCopy(root, root / packed["resume_rel"])


def parse_rank_config(argv: Sequence[str] | None, environ: Mapping[str, str] | None = None,
                      ) -> tuple[dict[str, Any], ResumeCopy | None]:
    """The config data of this rank (:func:`pipeline.config.flags.parse_config`) and, on a rank
    whose machine lacks the run to continue, its copy of the run from the first rank that has
    it (see the module docstring). Outside ``torchrun``, or without anything to continue, it is
    ``parse_config`` alone."""
    env = os.environ if environ is None else environ
    argv = list(sys.argv[1:] if argv is None else argv)
    restarts, world, rank = (env_int(env, name, d) for name, d in
                             (("TORCHELASTIC_RESTART_COUNT", 0), ("WORLD_SIZE", 1), ("RANK", 0)))
    if world < 2:
        return parse_config(argv), None
    args = build_parser().parse_args(argv)
    target: str | None = args.resume or (args.run_dir if restarts else None)
    timeout = datetime.timedelta(seconds=collective_timeout_s(env))
    store = attempt_store(env, restarts, timeout) if target else None
    if store is None or target is None:  # nothing to continue, or ranks without torchrun's store
        return parse_config(argv), None
    holds = run_dir_of(target) is not None or (bool(args.resume) and Path(target).is_file())
    store.set(f"holds/{rank}", "1" if holds else "0")
    try:
        store.wait([f"holds/{r}" for r in range(world)], timeout)
        source = next((r for r in range(world) if store.get(f"holds/{r}") == b"1"), None)
    except RuntimeError as exc:
        raise ConfigError(f"rank {rank}: the other ranks did not say within {timeout.total_seconds():.0f} s "
                          f"whether they hold the run to continue: {squeezed(exc, 200)}") from None
    if source is None:  # no rank has it: each refuses it alike
        return parse_config(argv), None
    if rank == source:
        try:
            data = parse_config(argv)
            packed = pack_run(target)
        except ConfigError as exc:
            store.set(KEY, msgpack.packb({"error": str(exc)}))
            raise
        run_dir = data.get("run", {}).get("run_dir")
        # A restarted job continues its --run-dir (pipeline.run.ranks.Job.job_config).
        resume = data["run"].get("resume") if args.resume else str(Path(run_dir)) if run_dir else None
        store.set(KEY, msgpack.packb({**packed, "run_dir": run_dir, "resume": resume}))
        return data, None
    try:
        packed = msgpack.unpackb(store.get(KEY))
    except RuntimeError as exc:
        raise ConfigError(f"rank {rank}: rank {source} sent no run to continue within "
                          f"{timeout.total_seconds():.0f} s: {squeezed(exc, 200)}") from None
    if "error" in packed:
        raise ConfigError(f"rank {source} could not start: {packed['error']}")
    if holds or not packed["files"] or (not args.resume and "config.toml" not in packed["files"]):
        return parse_config(argv), None  # this machine holds the run too, or there is none
    copy = unpack_run(packed)
    try:
        data = parse_config(_resume_from(argv, copy.resume_from, has_resume=bool(args.resume)))
        data.setdefault("run", {}).update(run_dir=packed["run_dir"], resume=packed["resume"])
    except BaseException:
        copy.remove()
        raise
    return data, copy


def _resume_from(argv: list[str], path: Path, has_resume: bool) -> list[str]:
    """``argv`` with ``--resume`` naming ``path`` (added when absent: a restarted job)."""
    if not has_resume:
        return [*argv, "--resume", str(path)]
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--resume":
            skip = True
            continue
        if not arg.startswith("--resume="):
            out.append(arg)
    return [*out, "--resume", str(path)]
