"""The architecture, read from the import graph (no imports executed: this file needs no torch).

Arrows run api → adapters → core only; no module-level import circle among the project's
modules; no function-local import of a project module (the way circles get dodged), except the
few lazy imports listed below with their reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nnx_core", "nnx_adapters", "nnx_api")
LAYER = {"nnx_core": 0, "nnx_adapters": 1, "nnx_api": 2}
LAZY_ALLOWED: set[tuple[str, str]] = set()  # (module, project module it imports inside a function), with a reason


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The project module ``name`` refers to (its longest known prefix), None outside the project."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(path: Path, known: dict[str, Path], *, local: bool) -> set[str]:
    """Project modules imported at module level (``local=False``) or inside functions (``True``)."""
    tree = ast.parse(path.read_text())
    here = module_name(path)
    found: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function == local:
                names = []
                if isinstance(child, ast.Import):
                    names = [a.name for a in child.names]
                elif child.module and child.level == 0:
                    names = [f"{child.module}.{a.name}" for a in child.names]
                for name in names:
                    target = resolve(name, known)
                    if target is not None and target != here:
                        found.add(target)
            visit(child, inner)

    visit(tree, False)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known, local=False) for name, path in known.items()}


def test_arrows_run_api_to_adapters_to_core_only():
    wrong = [
        f"{src} imports {dst}"
        for src, targets in graph().items()
        for dst in targets
        if LAYER[dst.split(".")[0]] > LAYER[src.split(".")[0]]
    ]
    assert wrong == []


def test_no_import_circles():
    g = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(g[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            walk(node)
    assert cycles == []


def test_no_function_local_imports_of_project_modules():
    known = modules()
    lazy = {(name, dst) for name, path in known.items() for dst in imports(path, known, local=True)}
    assert lazy - LAZY_ALLOWED == set()
    assert LAZY_ALLOWED <= lazy  # the allowance names only lazy imports that exist


def test_the_graph_sees_real_edges():
    """The checks above can fail: the graph holds the edges every reader knows are there."""
    g = graph()
    assert "nnx_core.commit" in g["nnx_core.admission"]
    assert "nnx_api.launch" in g["nnx_api.model"]
    assert "nnx_core.update" in g["nnx_api.training.owners"]
