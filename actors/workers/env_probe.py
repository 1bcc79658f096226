"""A Gymnasium env tried once in a process of its own before a run: made and reset there, so
that an env which exits, segfaults or fails its first reset is one line naming it, not the end
of the process that launched it.

The parent's side is :func:`check_env_in_child`; the child's, ``env_worker.probe_main`` (loaded
by path as the env workers are, see ``actors/workers/env_worker.py``).
"""

from __future__ import annotations

import pickle
from multiprocessing import get_context
from typing import Any

from actors.gym_actor import check_spaces
from actors.workers import env_protocol, env_worker
from actors.workers.supervision import WorkerFault, spawn_by_path

PROBE_TIMEOUT_S = 120.0
"""Time the probe may take to import, make and reset the env (a loaded host)."""

_DOING = {"start": "starting", "make": "being made", "reset": "being reset"}
"""What the env was doing at each stage the child reports."""


def check_env_in_child(factory: Any, name: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Make ``factory()`` and reset it (seed 0) in a spawned process; raise ``ValueError`` in one
    line naming ``name`` and what happened: what the env raised or returned, a space the
    learner cannot use (``actors.gym_actor.check_spaces``, before the reset), or how its
    process ended (``exited with code 0``, ``killed by SIGSEGV``) and at which stage."""
    child = spawn_by_path(get_context("spawn"), "env-probe", [env_protocol, env_worker], "probe_main",
                          {"spec": pickle.dumps(("fns", [factory]))})
    stage = "start"
    try:
        while True:
            try:
                report: dict[str, Any] = pickle.loads(child.receive(timeout_s))
            except WorkerFault as fault:
                how = (f"gave no answer within {timeout_s:g}s" if fault.reason == "timeout"
                       else f"ended ({child.exit_description()})")
                raise ValueError(f"env {name}: its process {how} while {_DOING[stage]}") from None
            if "stage" in report:
                stage = report["stage"]
                if "spaces" in report:  # a space the learner cannot use is named as such
                    check_spaces(name, *report["spaces"])
            elif report["ok"]:
                return
            else:
                raise ValueError(f"env {name}: {report['error']}")
    finally:
        child.stop(1.0)
