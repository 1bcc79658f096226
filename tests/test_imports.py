"""The import arrows point one way: no package imports from a floor above it or from a sibling on
its own floor, ``monitoring`` stays beside the stack, and no two modules import each other.

Floors, lowest first: ``core`` (0) <- ``sim`` (1) <- ``agents`` and ``rewards`` (2) <- ``actors``
and ``learner`` (3) <- ``pipeline`` (4). ``monitoring`` imports nothing of ours but ``core`` and
may be imported by ``actors``, ``learner`` and ``pipeline``. ``tests`` and ``bench`` may import
anything and nothing imports them.

Every import counts: ``import a.b``, ``from a import b``, relative imports, imports inside
functions, ``try:`` blocks and ``if TYPE_CHECKING:`` blocks, and ``importlib.import_module`` /
``__import__`` with a literal name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FLOORS: dict[str, int] = {
    "core": 0,
    "sim": 1,
    "agents": 2, "rewards": 2,
    "actors": 3, "learner": 3,
    "pipeline": 4,
}
"""The floor of each package of the stack."""

MONITORING = "monitoring"
MONITORING_MAY_IMPORT = frozenset({"core", MONITORING})
MONITORING_IMPORTED_BY = frozenset({"actors", "learner", "pipeline"})
TOP = frozenset({"tests", "bench"})
"""Folders that may import anything and that library code never imports."""

CHECKED = (*FLOORS, MONITORING)
"""The packages whose files are walked."""

OURS = frozenset((*CHECKED, *TOP))


@dataclass(frozen=True)
class Import:
    """One import statement's target, resolved to a dotted module name."""

    file: Path
    line: int
    source: str  # module doing the import
    target: str  # module imported, as written (``from pkg import sub`` gives ``pkg.sub``)
    node: str  # the longest prefix of ``target`` that is one of our modules: its graph node


def module_name(root: Path, path: Path) -> str:
    """``agents/registry.py`` -> ``agents.registry``; ``agents/__init__.py`` -> ``agents``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _walk_files(root: Path, packages: tuple[str, ...]) -> Iterator[Path]:
    for pkg in packages:
        base = root / pkg
        if base.is_dir():
            yield from sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)


def _literal_import_call(node: ast.Call) -> str | None:
    """The name in ``importlib.import_module("x")`` / ``import_module("x")`` / ``__import__("x")``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith("."):
        return arg.value
    return None


def raw_imports(source: str, module: str, is_package: bool) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """``(line, module, names)`` for every import in ``source``, wherever it sits.

    ``names`` are the names of a ``from module import names`` (empty for ``import module``);
    relative imports are resolved against ``module``.
    """
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".") if package else []
                keep = len(anchor) - (node.level - 1)
                anchor = anchor[:max(keep, 0)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base, tuple(a.name for a in node.names)
        elif isinstance(node, ast.Call):
            name = _literal_import_call(node)
            if name is not None:
                yield node.lineno, name, ()


def collect_imports(root: Path, packages: tuple[str, ...] = CHECKED) -> tuple[set[str], list[Import]]:
    """Our modules under ``root`` and every import of ours they make."""
    files = list(_walk_files(root, packages))
    # Every module in the project, including tests/bench, so targets resolve to real modules.
    modules = {module_name(root, p) for p in _walk_files(root, tuple(OURS))}
    found: list[Import] = []
    for path in files:
        src_mod = module_name(root, path)
        text = path.read_text(encoding="utf-8")
        for line, target, names in raw_imports(text, src_mod, path.name == "__init__.py"):
            if target.partition(".")[0] not in OURS:
                continue
            # ``from pkg import sub`` imports the module pkg.sub; ``from pkg import name`` the package.
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            for written in subs or [target]:
                node = _longest_module(written, modules)
                if node != src_mod:
                    found.append(Import(path, line, src_mod, written, node))
    return {module_name(root, p) for p in files}, found


def _longest_module(name: str, modules: set[str]) -> str:
    """``agents.registry.make_agent`` -> ``agents.registry`` (the longest prefix that is a module)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in modules:
            return candidate
    return name


def floor_violation(source: str, target: str) -> str | None:
    """Why importing ``target`` from ``source`` breaks the floors, or ``None`` when it may."""
    src, dst = source.partition(".")[0], target.partition(".")[0]
    if src == dst:
        return None
    if dst in TOP:
        return f"{src} imports {dst}, which only imports others"
    if src == MONITORING:
        return None if dst in MONITORING_MAY_IMPORT else f"monitoring imports {dst} (only core)"
    if dst == MONITORING:
        return None if src in MONITORING_IMPORTED_BY else f"{src} imports monitoring"
    if FLOORS[dst] == FLOORS[src]:
        return f"{src} imports its floor-{FLOORS[src]} sibling {dst}"
    if FLOORS[dst] > FLOORS[src]:
        return f"{src} (floor {FLOORS[src]}) imports {dst} (floor {FLOORS[dst]})"
    return None


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph`` with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check(root: Path, packages: tuple[str, ...] = CHECKED) -> list[str]:
    """Every broken arrow under ``root``, one ``file:line -> module (why)`` line each."""
    modules, imports = collect_imports(root, packages)
    problems = []
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        where = f"{imp.file.relative_to(root)}:{imp.line} -> {imp.target}"
        why = floor_violation(imp.source, imp.target)
        if why is not None:
            problems.append(f"{where} ({why})")
        if imp.node in modules:
            graph[imp.source].add(imp.node)
    for comp in strongly_connected(graph):
        members = set(comp)
        # Name each import that keeps the cycle closed, so the fix can start from a line.
        edges = sorted(
            f"{i.file.relative_to(root)}:{i.line} -> {i.target}"
            for i in imports if i.source in members and i.node in members
        )
        problems.append(f"import cycle among {', '.join(comp)}: " + "; ".join(edges))
    return problems


def test_no_import_breaks_the_floors_and_no_module_imports_itself_back():
    problems = check(ROOT)
    if problems:
        pytest.fail("broken import arrows:\n" + "\n".join(problems), pytrace=False)


def test_the_walk_sees_every_package():
    modules, imports = collect_imports(ROOT)
    for pkg in CHECKED:
        assert pkg in modules, f"package {pkg!r} not found under {ROOT}"
    assert len(imports) > 50, f"only {len(imports)} imports found: the walk misses files"


# ---------------------------------------------------------------- the checker catches what it should


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for pkg in CHECKED:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return tmp_path


def test_checker_accepts_downward_imports_and_package_reexports(tmp_path: Path):
    root = _tree(tmp_path, {
        "sim/state.py": "import torch\nfrom core.files import atomic_write\n",
        "agents/__init__.py": "from agents.base import Base\nfrom agents.scripted import Rule\n",
        "agents/base.py": "from sim.state import x\nfrom core import plugins\n",
        "agents/scripted.py": "from agents.base import Base\nfrom .base import Base as B\n",
        "core/plugins.py": "import importlib\n",
        "learner/net.py": "import agents.base\nfrom monitoring import span\nimport sim\n",
        "monitoring/facade.py": "from core.plugins import load\n",
        "pipeline/run.py": "import actors, learner, monitoring, agents.scripted\n",
    })
    assert check(root) == []


@pytest.mark.parametrize(("files", "expected"), [
    ({"agents/registry.py": "def f():\n    from learner.checkpoint import load\n"},
     "agents/registry.py:2 -> learner.checkpoint (agents (floor 2) imports learner (floor 3))"),
    ({"rewards/registry.py": "try:\n    import agents.registry\nexcept ImportError:\n    pass\n"},
     "rewards/registry.py:2 -> agents.registry (rewards imports its floor-2 sibling agents)"),
    ({"actors/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from learner import ppo\n",
      "learner/ppo.py": ""},
     "actors/a.py:3 -> learner.ppo (actors imports its floor-3 sibling learner)"),
    ({"core/x.py": "from sim import y\n"}, "core/x.py:1 -> sim (core (floor 0) imports sim (floor 1))"),
    ({"monitoring/demo.py": "from pipeline.transport.ring import Ring\n"},
     "monitoring/demo.py:1 -> pipeline.transport.ring (monitoring imports pipeline (only core))"),
    ({"agents/x.py": "import monitoring\n"}, "agents/x.py:1 -> monitoring (agents imports monitoring)"),
    ({"learner/x.py": "import importlib\nm = importlib.import_module('pipeline.transport.ring')\n"},
     "learner/x.py:2 -> pipeline.transport.ring (learner (floor 3) imports pipeline (floor 4))"),
    ({"pipeline/x.py": "from tests import helpers\n"},
     "pipeline/x.py:1 -> tests (pipeline imports tests, which only imports others)"),
    ({"sim/sub/deep.py": "from ...agents import base\n"},
     "sim/sub/deep.py:1 -> agents (sim (floor 1) imports agents (floor 2))"),
])
def test_checker_catches_a_planted_floor_violation(tmp_path: Path, files: dict[str, str], expected: str):
    assert check(_tree(tmp_path, files)) == [expected]


def test_checker_catches_a_planted_cycle(tmp_path: Path):
    root = _tree(tmp_path, {
        "learner/a.py": "from learner.b import x\n",
        "learner/b.py": "def f():\n    import learner.c\n",
        "learner/c.py": "from learner import a\n",
        "learner/d.py": "from learner.a import y\n",  # imports into the cycle, is not part of it
    })
    assert check(root) == [
        "import cycle among learner.a, learner.b, learner.c: "
        "learner/a.py:1 -> learner.b; learner/b.py:2 -> learner.c; learner/c.py:1 -> learner.a"
    ]


def test_checker_counts_a_submodule_importing_its_own_package_root_as_a_cycle(tmp_path: Path):
    # agents/__init__ imports agents.policy, which imports the half-built package back.
    root = _tree(tmp_path, {
        "agents/__init__.py": "from agents.policy import PolicyAgent\n",
        "agents/policy.py": "from agents import BaseAgent\n",
    })
    assert check(root) == [
        "import cycle among agents, agents.policy: "
        "agents/__init__.py:1 -> agents.policy; agents/policy.py:1 -> agents"
    ]
