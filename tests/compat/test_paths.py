"""NNx's public module paths (REFERENCE §0–§3: the import paths NNx documents and its users write),
after the one mechanical change ``nnx`` → ``nnx_api``, checked against their one table,
``nnx_api/nnx_paths.py``.

Every path of the table has its file, which opens with the declared first docstring line; a shim
exposes exactly the table's names, each the very object of the home the table names (and of the
top-level ``nnx_api`` export of that name: one class, re-exported, never a copy); a home keeps the
names the table lists; an out-of-scope path imports and refuses its names with ``OutOfScopeError``
naming the scope. No re-export or placeholder module is missing from the table, and every module of
NNx 0.4.1's wheel (``nnx_wheel_modules.txt``) is a path of the table or says why it is not.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import nnx_api as nnx
from nnx_api.nnx_paths import (
    HOME,
    KINDS,
    NOT_MIRRORED,
    OUT_OF_SCOPE,
    PATHS,
    PROJECT,
    RE_EXPORTS,
    RETIRED,
    SHIM,
    TABLE,
    first_line,
    nnx_name,
)

ROOT = Path(__file__).resolve().parents[2]
WHEEL_LIST = Path(__file__).with_name("nnx_wheel_modules.txt")
NNX_PYTHON = ROOT / ".venv-nnx" / "bin" / "python"  # NNx 0.4.1 itself, installed by `make compat-diff`
NNX_INSTALLED = ROOT / ".venv-nnx" / ".installed"  # the Makefile's stamp: written once the wheel is in
NNX_KINDS = (SHIM, HOME, OUT_OF_SCOPE)  # the kinds of NNx's own paths (PROJECT paths are ours)


def file_of(path: str) -> Path:
    """The file of the module ``path`` (a module file, or a package's ``__init__.py``)."""
    here = ROOT.joinpath(*path.split("."))
    return here.with_suffix(".py") if here.with_suffix(".py").exists() else here / "__init__.py"


def of_kind(*kinds: str) -> list[str]:
    return sorted(path for path, entry in PATHS.items() if entry.kind in kinds)


def wheel_modules() -> list[str]:
    """NNx 0.4.1's modules, as ``nnx_wheel_modules.txt`` lists them (``#`` lines are its header)."""
    lines = WHEEL_LIST.read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def importable(path: str) -> bool:
    try:
        return importlib.util.find_spec(path) is not None
    except ModuleNotFoundError:  # a parent that does not exist, or is not a package
        return False


# --- the table ---------------------------------------------------------------------------------------
def test_the_table_is_plain_data_that_imports_no_torch():
    code = "import sys, nnx_api.nnx_paths; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_every_entry_is_well_formed():
    for path, entry in PATHS.items():
        assert path == "nnx_api" or path.startswith("nnx_api."), path
        assert entry.kind in KINDS, path
        specs = [spec for specs in entry.homes.values() for spec in specs]
        assert len(specs) == len(entry.bindings), f"{path}: a name bound twice"
        assert (entry.kind == OUT_OF_SCOPE) == bool(entry.scope), f"{path}: a scope for out-of-scope paths only"
        if entry.kind == HOME:
            assert list(entry.homes) == [path], f"{path}: a home is its own module"
        if entry.kind in RE_EXPORTS:
            assert path not in entry.homes, f"{path}: a re-export module re-exports other modules"


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_path_has_its_file_which_opens_with_the_declared_line(path):
    file = file_of(path)
    assert file.is_file(), f"{path}: no {file.relative_to(ROOT)}"
    declared = first_line(path)
    if declared is None:  # a home keeps a docstring of its own
        assert PATHS[path].kind == HOME and ast.get_docstring(ast.parse(file.read_text()))
        return
    assert declared.endswith(f"({TABLE}).") and (PATHS[path].kind == PROJECT or declared.startswith(
        f"NNx path ``{nnx_name(path)}``: "))
    docstring = ast.get_docstring(ast.parse(file.read_text()), clean=False) or ""
    assert docstring.splitlines()[0] == declared


@pytest.mark.parametrize("path", of_kind(*RE_EXPORTS))
def test_each_shim_exposes_the_table_names_each_the_very_object_of_its_home(path):
    entry = PATHS[path]
    module = importlib.import_module(path)
    assert sorted(module.__all__) == list(entry.names)
    for name, (home, original) in entry.bindings.items():
        assert getattr(module, name) is getattr(importlib.import_module(home), original), f"{path}.{name}"
    assert not_the_top_level_objects(module, entry.names) == []


def not_the_top_level_objects(module, names) -> list[str]:
    """The names of ``module`` that the top-level ``nnx_api`` exports as another object."""
    return [
        name for name in names
        if name in nnx.__all__ and not inspect.ismodule(getattr(nnx, name))  # nnx.search is the module, as in NNx
        and getattr(module, name) is not getattr(nnx, name)
    ]


@pytest.mark.parametrize("path", of_kind(HOME))
def test_each_home_keeps_exposing_the_table_names(path):
    module = importlib.import_module(path)
    missing = [name for name in PATHS[path].names if name not in module.__all__ or getattr(module, name, None) is None]
    assert missing == []
    assert not_the_top_level_objects(module, PATHS[path].names) == []


@pytest.mark.parametrize("path", of_kind(OUT_OF_SCOPE))
def test_each_out_of_scope_path_refuses_its_names_naming_the_scope(path):
    entry = PATHS[path]
    module = importlib.import_module(path)
    if hasattr(module, "__all__"):
        assert sorted(module.__all__) == list(entry.names)
    for name, (home, original) in entry.bindings.items():
        namespace: dict = {}
        exec(f"from {path} import {name}", namespace)  # a script that only imports it still loads
        value = namespace[name]
        if home != path:  # an in-scope name beside the placeholders: the very object of its home
            assert value is getattr(importlib.import_module(home), original)
            assert not_the_top_level_objects(module, [name]) == []
        elif isinstance(value, type) and issubclass(value, nnx.NNxError):  # the error class NNx's handlers catch
            assert value.__module__ == path
        else:
            with pytest.raises(nnx.OutOfScopeError, match=re.escape(entry.scope)):
                value()


def shim_like(path: str, file: Path) -> bool:
    """A module that re-exports names of modules outside it (a package's ``__init__`` gathering its
    own submodules is not one) or builds out-of-scope placeholders at import."""
    tree = ast.parse(file.read_text())
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    outside = [n for n in body if isinstance(n, ast.ImportFrom) and not (n.module or "").startswith(path + ".")]
    builds = any(isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("placeholder", "refusing_module")
                 for node in body if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) for n in ast.walk(node))
    only = all(isinstance(n, (ast.Import, ast.ImportFrom)) or (
        isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] in (["__all__"], ["__getattr__"])) for n in body)
    return builds or (only and bool(outside))


def test_every_re_export_or_placeholder_module_is_in_the_table():
    found = {}
    for file in sorted((ROOT / "nnx_api").rglob("*.py")):
        parts = file.relative_to(ROOT).with_suffix("").parts
        path = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if path.startswith("nnx_api.nn.") or path == "nnx_api.nn" or shim_like(path, file):
            found[path] = file
    assert "nnx_api.monitors" in found and "nnx_api.nn.net.vit_nn" in found and "nnx_api.paradigms" in found
    assert "nnx_api.callbacks" not in found and "nnx_api.model" not in found  # the check can tell
    assert sorted(set(found) - set(PATHS)) == []
    assert all(PATHS[path].kind in (*RE_EXPORTS, OUT_OF_SCOPE) for path in found)


# --- NNx 0.4.1's wheel -----------------------------------------------------------------------------
def test_every_module_of_the_wheel_resolves_through_the_table_or_says_why_not():
    wheel = wheel_modules()
    assert len(wheel) > 150 and wheel == sorted(set(wheel)) and "nnx.nn.params.nn_train_params" in wheel
    ours = {"nnx_api" + module.removeprefix("nnx") for module in wheel}
    mirrored = set(of_kind(*NNX_KINDS))
    assert sorted(mirrored - ours) == []  # the table invents no NNx path
    assert sorted(ours - mirrored) == sorted(NOT_MIRRORED)  # every other module of the wheel says why
    assert sorted(set(of_kind(PROJECT)) & ours) == []  # this project's own paths are not NNx's
    assert all(reason.strip() for reason in NOT_MIRRORED.values())
    assert [path for path in NOT_MIRRORED if importable(path)] == []  # "not here" is true


@pytest.mark.skipif(not NNX_INSTALLED.exists(), reason="NNx 0.4.1 is installed (.venv-nnx) by `make compat-diff` only")
def test_the_committed_module_list_is_the_installed_wheels():
    code = (
        "import importlib.metadata as m\n"
        "print(*sorted(str(f)[:-3].replace('/', '.').removesuffix('.__init__') for f in m.files('thekaveh-nnx')\n"
        "              if str(f).startswith('nnx/') and str(f).endswith('.py')), sep='\\n')\n"
    )
    listed = subprocess.run([str(NNX_PYTHON), "-c", code], check=True, capture_output=True, text=True, timeout=120)
    assert listed.stdout.split() == wheel_modules()


# --- the old paths and the lazy export table --------------------------------------------------------
def test_the_retired_paths_are_gone_and_nothing_imports_or_names_them():
    for old, home in RETIRED.items():
        assert old not in PATHS and not file_of(old).exists() and not importable(old), old
        assert importable(home), home
    retired = set(RETIRED)
    imports = []
    for folder in ("nnx_api", "nnx_core", "nnx_adapters", "tests", "examples", "bench"):
        for file in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(file.read_text())):
                names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
                imports += [f"{file.relative_to(ROOT)}: {name}" for name in names if name in retired]
    assert imports == []
    spelled = re.compile("|".join(re.escape(old) + r"\b|" + re.escape(old.replace(".", "/") + ".py") for old in retired))
    docs = [f"{doc.relative_to(ROOT)}: {hit.group()}" for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
            for hit in spelled.finditer(doc.read_text())]
    assert docs == []


def test_the_lazy_export_table_agrees_with_the_path_table():
    """``nnx_api._EXPORTS`` (the top-level names, by the module each is taken from) names no retired
    module, and takes from one of NNx's paths only names the path table gives it."""
    for module, specs in nnx._EXPORTS.items():
        assert module not in RETIRED, module
        names = {spec.rpartition(" as ")[2] for spec in specs}
        if module in PATHS:
            exposed = set(PATHS[module].names) | set(importlib.import_module(module).__all__)
            assert names <= exposed, module
    modules = {f"nnx_api.{name}" for name in (*nnx._MODULES, *nnx._LAZY_MODULES)}
    assert sorted(modules & set(RETIRED)) == []
    nnx_paths = {"nnx_api" + module.removeprefix("nnx") for module in wheel_modules()}
    assert sorted((modules & nnx_paths) - set(PATHS)) == []  # the package's public modules that are NNx's paths


def test_the_documented_top_level_names_exist():
    documented = PATHS["nnx_api"].names
    assert [name for name in documented if getattr(nnx, name, None) is None] == []
    assert set(documented) <= set(nnx.__all__)


# --- registration lives in the homes ----------------------------------------------------------------
def test_importing_the_metric_registry_is_enough_for_a_monitor_to_know_a_declared_direction():
    """``MonitorSpec.resolve`` learns a declared metric's direction from the registry's home
    (``nnx_adapters.pytorch.metrics``), not from importing the ``nnx_api.monitors`` shim."""
    code = (
        "import importlib, sys\n"
        "import nnx_api\n"
        "from nnx_adapters.pytorch.metrics import register_metric\n"
        "from nnx_api.config.metrics import MetricSpec\n"
        "MonitorSpec = getattr(importlib.import_module(nnx_api._NAMES['MonitorSpec'][0]), 'MonitorSpec')\n"
        "register_metric('p99_latency', 1, lambda config, n_classes: None, input='continuous', mode='max')\n"
        "assert MonitorSpec('p99_latency').resolve([MetricSpec('p99_latency')]).mode == 'max'\n"
        "assert 'nnx_api.monitors' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT)


def test_records_are_one_class_under_both_names():
    from nnx_api.nn.params.nn_evaluation_data_point import NNEvaluationDataPoint
    from nnx_api.nn.params.nn_iteration_data_point import NNIterationDataPoint

    assert NNEvaluationDataPoint is nnx.EvaluationDataPoint
    assert NNIterationDataPoint is nnx.IterationDataPoint


@pytest.mark.parametrize(
    "path, name, scope",
    [
        ("nnx_api.nn.net.graph_conv_nn", "GraphConvNN", "graph nets"),
        ("nnx_api.nn.net.transformer_nn", "TransformerNN", "transformers"),
        ("nnx_api.nn.params.nn_transformer_params", "NNTransformerParams", "transformers"),
        ("nnx_api.nn.params.nn_moe_params", "NNMoEParams", "mixture-of-experts"),
        ("nnx_api.nn.generative_nn_model", "GenerativeNNModel", "language-model"),
    ],
)
def test_out_of_scope_names_import_but_refuse_to_be_used_naming_the_scope(path, name, scope):
    module = importlib.import_module(path)
    namespace: dict = {}
    exec(f"from {path} import {name}", namespace)  # a script that only imports it still loads
    placeholder = namespace[name]
    assert placeholder is not None and not isinstance(object(), placeholder)
    with pytest.raises(nnx.OutOfScopeError, match=scope):
        placeholder()
    with pytest.raises(nnx.OutOfScopeError, match=scope):
        getattr(module, name).builder()


@pytest.mark.parametrize(
    "name, scope",
    [("GraphSageNN", "graph nets"), ("NNTransformerParams", "transformers"), ("apply_lora_to", "LoRA"),
     ("quantize_int8", "quantisation"), ("interop", "GGUF"), ("GenerativeNNModel", "language-model")],
)
def test_out_of_scope_top_level_names_are_refused_naming_the_scope(name, scope):
    with pytest.raises(nnx.OutOfScopeError, match=scope):
        getattr(nnx, name)(None)
    with pytest.raises(nnx.OutOfScopeError, match=scope):
        getattr(nnx, name).anything
    assert issubclass(nnx.OutOfScopeError, NotImplementedError)


def test_an_unknown_name_is_still_an_attribute_error():
    assert not hasattr(nnx, "NoSuchThing")


def test_hub_methods_and_provenance_are_refused_naming_the_scope(tmp_path):
    """REFERENCE §3.1/§3.3: the Hub mixin and ``train(provenance=...)`` are outside this scope."""
    model = nnx.NNModel(nnx.NNParams(input_dim=2, output_dim=2), nnx.NNModelParams())
    with pytest.raises(nnx.OutOfScopeError, match="Hugging Face Hub"):
        model.save_pretrained(tmp_path / "hub")
    with pytest.raises(nnx.OutOfScopeError, match="Hugging Face Hub"):
        nnx.NNModel.from_pretrained("user/model")
    params = nnx.NNTrainParams(n_epochs=1, train_loader=[(torch.zeros(2, 2), torch.zeros(2, dtype=torch.long))])
    with pytest.raises(nnx.OutOfScopeError, match="provenance"):
        model.train(params, root=tmp_path, provenance=object())
    assert not any(tmp_path.iterdir())  # refused before anything is written


@pytest.mark.parametrize("name", ["NLIProvider", "JevProvider", "JevTimeout"])
def test_nli_and_jev_providers_are_refused_naming_the_scope(name):
    namespace: dict = {}
    exec(f"from nnx_api.decisions import {name}", namespace)
    with pytest.raises(nnx.OutOfScopeError, match="NLI and Jev"):
        namespace[name]()
    with pytest.raises(AttributeError):
        nnx.decisions.NoSuchProvider  # noqa: B018


def test_the_compat_page_example_runs_and_its_migration_rewrites_nnx_imports(tmp_path, monkeypatch):
    """docs/nnx-compat.md: its example runs as written; its one-line migration turns NNx imports
    into these (and leaves other modules alone)."""
    import re
    import subprocess

    from tests.api.ecosystem_helpers import ROOT, run_doc

    ns = run_doc("nnx-compat.md", tmp_path, monkeypatch)
    assert ns["restored"].predict(X=ns["x"]).classes.shape == (64,)
    command = re.search(r"^(sed -i .*)$", (ROOT / "docs" / "nnx-compat.md").read_text(), re.M).group(1)
    script = tmp_path / "user.py"
    script.write_text(
        "import nnx\nfrom nnx.nn.callbacks import EarlyStopping\nimport nnx.history\nimport nnx as n2\nimport nnxother\n"
        "def f():\n    import nnx\n    return nnx.history.iter_history, EarlyStopping, n2.NNModel\n"
    )
    subprocess.run(command.replace("*.py", str(script)), shell=True, check=True, timeout=60)  # noqa: S602 - our doc
    assert script.read_text() == (
        "import nnx_api as nnx\nfrom nnx_api.nn.callbacks import EarlyStopping\n"
        "import nnx_api.history; import nnx_api as nnx\nimport nnx_api as n2\nimport nnxother\n"
        "def f():\n    import nnx_api as nnx\n    return nnx.history.iter_history, EarlyStopping, n2.NNModel\n"
    )
