"""The architecture, read from the import graph (no project code imported but the plain-data table
of NNx's module paths, ``nnx_api/nnx_paths.py``: this file needs no torch).

Arrows run api → adapters → core only (imports at any depth, function-local ones included); no
import circle among the project's modules, the core's own included, at any depth (a function-local
import closes a circle as surely as a module-level one); no function-local import of a project
module (the way circles get dodged), except the few lazy imports listed below with their reason.
Inside ``nnx_api`` the sub-packages and modules stand in the layers of ``API_LAYERS`` (lowest
first) and every import runs down: to a lower layer, or inside its own unit. No file of
``nnx_api`` is longer than ``MAX_LINES`` (``nnx_api/training``: ``MAX_TRAINING_LINES``): a file
past that holds several ideas, to be split by idea.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nnx_core", "nnx_adapters", "nnx_api")
LAYER = {"nnx_core": 0, "nnx_adapters": 1, "nnx_api": 2}
LAZY_ALLOWED: set[tuple[str, str]] = {  # (module, project module it imports inside a function), with a reason
    # torch, only where it is used: the `nnx` commands that read runs (list, show, compare, --help)
    # never import it (tests/api/test_cli_startup.py)
    ("nnx_api.runs.run", "nnx_api.config.params"),  # a run's params objects (their enums hold torch classes)
    ("nnx_api.runs.run", "nnx_api.config.train_params"),  # the same, for its training params
    ("nnx_api.runs.standalone", "nnx_api.config.params"),  # the params of a standalone checkpoint file read
    ("nnx_api.runs.payload", "nnx_adapters.pytorch.state"),  # encoding and decoding a payload
    ("nnx_api.commands.runs_extra", "nnx_api.model"),  # `nnx runs export`
    ("nnx_api.commands.runs_extra", "nnx_api.runs.export"),  # `nnx runs export`
}


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


def full_graph() -> dict[str, set[str]]:
    """Every import of a project module, at any depth (module level and inside functions)."""
    known = modules()
    return {name: imports(path, known, local=False) | imports(path, known, local=True) for name, path in known.items()}


def test_arrows_run_api_to_adapters_to_core_only():
    wrong = [
        f"{src} imports {dst}"
        for src, targets in full_graph().items()
        for dst in targets
        if LAYER[dst.split(".")[0]] > LAYER[src.split(".")[0]]
    ]
    assert wrong == []


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle the depth-first walk of ``g`` meets, each as the path that closes it."""
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
    return cycles


def test_no_import_circles_at_any_depth():
    """Module-level and function-local imports alike: a lazy import that closes a circle is a circle."""
    assert circles(full_graph()) == []


def test_the_core_import_graph_has_no_circles():
    """``nnx_core`` on its own (it is proved without the rest): no circle, function-local imports included."""
    g = full_graph()
    core = {name: {dst for dst in targets if dst.split(".")[0] == "nnx_core"}
            for name, targets in g.items() if name.split(".")[0] == "nnx_core"}
    assert "nnx_core.records" in core and "nnx_core.monitor_spec" in core["nnx_core.records"]
    assert circles(core) == []


def test_a_circle_is_caught():
    """The circle check can fail: a lazy import from the monitor's vocabulary back to the records
    (the circle this graph once held) is found, at whatever depth it sits."""
    g = full_graph()
    assert circles(g) == []
    g["nnx_core.monitor_spec"] = g["nnx_core.monitor_spec"] | {"nnx_core.records"}
    assert [set(cycle) for cycle in circles(g)] == [{"nnx_core.monitor_spec", "nnx_core.records"}]


def test_no_function_local_imports_of_project_modules():
    known = modules()
    lazy = {(name, dst) for name, path in known.items() for dst in imports(path, known, local=True)}
    assert lazy - LAZY_ALLOWED == set()
    assert LAZY_ALLOWED <= lazy  # the allowance names only lazy imports that exist


# --- file length ------------------------------------------------------------------------------------
MAX_LINES = 600  # any file of nnx_api
MAX_TRAINING_LINES = 450  # a file of nnx_api/training: the session's parts, each one idea


def longer_than(folder: Path, limit: int) -> list[str]:
    """``path: lines`` of every Python file under ``folder`` with more than ``limit`` lines."""
    found = ((p, len(p.read_text().splitlines())) for p in sorted(folder.rglob("*.py")))
    return [f"{p.relative_to(ROOT)}: {n}" for p, n in found if n > limit]


def test_no_nnx_api_file_holds_more_than_600_lines():
    assert longer_than(ROOT / "nnx_api", MAX_LINES) == []


def test_no_training_file_holds_more_than_450_lines():
    assert longer_than(ROOT / "nnx_api" / "training", MAX_TRAINING_LINES) == []


def test_the_graph_sees_real_edges():
    """The checks above can fail: the graph holds the edges every reader knows are there."""
    g = graph()
    assert "nnx_core.commit" in g["nnx_core.admission"]
    assert "nnx_api.launch" in g["nnx_api.model"]
    assert "nnx_core.update" in g["nnx_api.training.builtin_step"]


# --- the layers inside nnx_api ---------------------------------------------------------------------
# A unit is a sub-package (``nnx_api.training``: all its modules) or a top-level module
# (``nnx_api.model``); ``nnx_api`` itself is the package's ``__init__``. Lowest layer first: a unit
# imports units of lower layers only (never one of its own layer, never one above). The layers are
# docs/architecture.md's table (the page shows the map, these tests pin it): a new unit is placed
# there, or it is one of NNx's public module paths (nnx_api/nnx_paths.py).
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PUBLIC_ROW = 10  # the public modules: every top-level module no other row names (NNx's paths, nnx_api/nnx_paths.py)


def api_unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


def documented_layers() -> list[tuple[str, ...]]:
    """The layers of docs/architecture.md's api-layers table (lowest first): each row's units in
    backticks (``training`` is ``nnx_api.training``; ``nnx_api`` is the package's ``__init__``),
    the public-modules row filled with the top-level modules the other rows leave out."""
    table = ARCHITECTURE.read_text().split("<!-- api-layers", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|", table, flags=re.M)
    assert [int(n) for n, _ in rows] == list(range(len(rows))), "the rows are numbered 0, 1, … in order"
    layers = [tuple(u if u == "nnx_api" else f"nnx_api.{u}" for u in re.findall(r"`(\w+)`", cell)) for _, cell in rows]
    named = {unit for layer in layers for unit in layer}
    layers[PUBLIC_ROW] = tuple(sorted({api_unit(m) for m in modules() if m.startswith("nnx_api.")} - named))
    return layers


API_LAYERS: list[tuple[str, ...]] = documented_layers()


def api_layer() -> dict[str, int]:
    return {unit: i for i, layer in enumerate(API_LAYERS) for unit in layer}


def upward_api_arrows(g: dict[str, set[str]]) -> list[str]:
    level = api_layer()
    return sorted(
        f"{src} imports {dst} ({api_unit(src)}: layer {level[api_unit(src)]}, {api_unit(dst)}: layer {level[api_unit(dst)]})"
        for src, targets in g.items() if src.split(".")[0] == "nnx_api"
        for dst in targets if dst.split(".")[0] == "nnx_api" and api_unit(dst) != api_unit(src)
        and level[api_unit(dst)] >= level[api_unit(src)]
    )


def table_paths() -> set[str]:
    """The module paths of nnx_api/nnx_paths.py's ``PATHS`` table (read, not imported)."""
    tree = ast.parse((ROOT / "nnx_api" / "nnx_paths.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "PATHS":
            assert isinstance(node.value, ast.Dict)
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    raise AssertionError("nnx_api/nnx_paths.py has no PATHS table")


def test_the_public_modules_row_holds_only_public_paths():
    """A module no row of the architecture page names must be one of NNx's paths in the table."""
    assert API_LAYERS[PUBLIC_ROW] and set(API_LAYERS[PUBLIC_ROW]) <= table_paths()


def test_every_nnx_api_unit_has_one_layer():
    placed = [unit for layer in API_LAYERS for unit in layer]
    assert len(placed) == len(set(placed))
    assert {api_unit(m) for m in modules() if m.split(".")[0] == "nnx_api"} == set(placed)


def test_imports_inside_nnx_api_run_down_the_layers():
    """Function-local imports count: a lazy import that runs back up is an arrow all the same."""
    assert upward_api_arrows(full_graph()) == []


def test_an_upward_import_is_caught():
    g = full_graph()
    before = upward_api_arrows(g)
    assert "nnx_api.training.fingerprint" in g  # no distributed import: the roles of nnx_api.training.roles
    g["nnx_api.training.fingerprint"] = g["nnx_api.training.fingerprint"] | {"nnx_api.distributed.loaders"}
    g["nnx_api.parts.models"] = g["nnx_api.parts.models"] | {"nnx_api.finetune"}  # the same layer
    assert [arrow for arrow in upward_api_arrows(g) if arrow not in before] == [
        "nnx_api.parts.models imports nnx_api.finetune (nnx_api.parts: layer 2, nnx_api.finetune: layer 2)",
        "nnx_api.training.fingerprint imports nnx_api.distributed.loaders (nnx_api.training: layer 4, "
        "nnx_api.distributed: layer 5)",
    ]


def test_re_export_modules_import_their_declared_names_and_nothing_else():
    """A shim of ``nnx_api/nnx_paths.py`` (one of NNx's module paths, or this project's own re-export
    module) holds a docstring, imports of exactly the names the table declares, each from the home
    it declares, and ``__all__``: no code and no registration, so importing a home is all its names
    need. Read from the files (the table is plain data: importing it imports no torch)."""
    from nnx_api.nnx_paths import PATHS, RE_EXPORTS

    known = modules()
    shims = {path: entry for path, entry in PATHS.items() if entry.kind in RE_EXPORTS}
    assert len(shims) > 40 and "nnx_api.monitors" in shims  # the check below can fail
    for path, entry in shims.items():
        tree = ast.parse(known[path].read_text())
        assert ast.get_docstring(tree), f"{path}: no docstring"
        bound: dict[str, tuple[str, str]] = {}
        for node in tree.body[1:]:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                bound.update({alias.asname or alias.name: (node.module, alias.name) for alias in node.names})
            else:
                assert isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"], (
                    f"{path}:{node.lineno}: code in a re-export module"
                )
        assert bound == entry.bindings, f"{path}: its imports are not the table's"
