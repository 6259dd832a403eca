"""The architecture, read from the import graph (no imports executed: this file needs no torch).

Arrows run api → adapters → core only (imports at any depth, function-local ones included); no
module-level import circle among the project's modules; no function-local import of a project
module (the way circles get dodged), except the few lazy imports listed below with their reason.
Inside ``nnx_api`` the sub-packages and modules stand in the layers of ``API_LAYERS`` (lowest
first) and every import runs down: to a lower layer, or inside its own unit.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nnx_core", "nnx_adapters", "nnx_api")
LAYER = {"nnx_core": 0, "nnx_adapters": 1, "nnx_api": 2}
LAZY_ALLOWED: set[tuple[str, str]] = {  # (module, project module it imports inside a function), with a reason
    # torch, only where it is used: the `nnx` commands that read runs (list, show, compare, --help)
    # never import it (tests/api/test_cli_startup.py)
    ("nnx_api.runs.run", "nnx_adapters.pytorch.state"),  # decoding a checkpoint blob
    ("nnx_api.runs.run", "nnx_api.config.params"),  # a run's params objects (their enums hold torch classes)
    ("nnx_api.runs.payload", "nnx_adapters.pytorch.state"),  # encoding and decoding a payload
    ("nnx_api.commands.runs_extra", "nnx_api.model"),  # `nnx runs export`
    ("nnx_api.commands.runs_extra", "nnx_api.runs.export"),  # `nnx runs export`
    ("nnx_core.records", "nnx_core.monitor"),  # MonitorRecord.monitor: nnx_core.monitor imports nnx_core.records
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


# --- the layers inside nnx_api ---------------------------------------------------------------------
# A unit is a sub-package (``nnx_api.training``: all its modules) or a top-level module
# (``nnx_api.model``); ``nnx_api`` itself is the package's ``__init__``. Lowest layer first: a unit
# imports units of lower layers only (never one of its own layer, never one above). A new unit
# must be placed here.
API_LAYERS: list[tuple[str, ...]] = [
    ("nnx_api.scope",),  # what NNx documents that this implementation leaves out
    ("nnx_api.config",),  # params, enums, builders
    ("nnx_api.finetune", "nnx_api.parts", "nnx_api.runs",  # freezing; nets, datasets, predictions; runs on disk
     "nnx_api.lr_finder", "nnx_api.streaming_metrics", "nnx_api.utils", "nnx_api.vis_utils"),  # standalone helpers
    ("nnx_api.callbacks",),
    ("nnx_api.training",),  # the session, steps, objectives, fingerprints (roles: nnx_api.training.roles)
    ("nnx_api.distributed",),  # DDP, sharded loaders
    ("nnx_api.launch",),  # the one training pipeline
    ("nnx_api.model",),  # NNModel
    ("nnx_api.trainer", "nnx_api.decide", "nnx_api.experiments", "nnx_api.nn", "nnx_api.commands"),
    ("nnx_api.cli",),  # the ``nnx`` console script
    # the public modules (``nnx.<name>``): re-export modules, some with a few helpers of their own
    ("nnx_api.cli_extra", "nnx_api.datasets", "nnx_api.decision_jobs", "nnx_api.decisions", "nnx_api.history",
     "nnx_api.inference", "nnx_api.models", "nnx_api.monitors", "nnx_api.objectives", "nnx_api.optimizers",
     "nnx_api.plans", "nnx_api.precision", "nnx_api.prediction", "nnx_api.search", "nnx_api.seeding",
     "nnx_api.storage", "nnx_api.streaming", "nnx_api.tasks", "nnx_api.data_splits", "nnx_api.paradigms",
     "nnx_api.preprocessing", "nnx_api.viz", "nnx_api.components"),
    ("nnx_api",),  # ``import nnx_api as nnx``
]
# modules that moved into a sub-package: the old path re-exports the public names, nothing more
MOVED = {
    "nnx_api.cli_extra": "nnx_api.commands.runs_extra",
    "nnx_api.datasets": "nnx_api.parts.datasets",
    "nnx_api.decision_jobs": "nnx_api.decide.jobs",
    "nnx_api.decisions": "nnx_api.decide.provider",
    "nnx_api.inference": "nnx_api.parts.inference",
    "nnx_api.models": "nnx_api.parts.models",
}


def api_unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


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


def test_moved_modules_leave_re_export_modules_behind():
    """The old path holds a docstring naming the new home, imports from it, and ``__all__``."""
    known = modules()
    for old, new in MOVED.items():
        assert new in known, new
        tree = ast.parse(known[old].read_text())
        docstring = ast.get_docstring(tree) or ""
        assert new in docstring, f"{old}: the docstring does not say the code lives in {new}"
        for node in tree.body[1:]:
            if isinstance(node, ast.ImportFrom):
                assert node.module in (new, "nnx_api.config.params"), f"{old}:{node.lineno} imports {node.module}"
            else:
                assert isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["__all__"], (
                    f"{old}:{node.lineno}: code in a re-export module"
                )
