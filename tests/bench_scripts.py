"""Loading a ``bench/`` script as a module, so its functions can be tested in-process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/NAME.py`` imported as the module ``bench_NAME``."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def exit_code(name: str, argv: list[str]) -> int | str | None:
    """The exit code ``bench/NAME.py``'s ``main(argv)`` raises ``SystemExit`` with (argparse's
    usage error: 2); an ``AssertionError`` if it returns instead."""
    try:
        load_bench(name).main(argv)
    except SystemExit as exc:
        return exc.code
    raise AssertionError(f"bench/{name}.py ran {argv} to the end")
