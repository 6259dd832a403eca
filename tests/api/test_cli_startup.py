"""``nnx`` starts fast: the commands that only read runs never import torch.

``import nnx_api`` binds its public names lazily (PEP 562, ``nnx_api/__init__.py``), and the run
readers import torch only where a blob is decoded or a run's params are built, so ``nnx --help``
and ``nnx runs list | show | compare`` skip it (docs/performance.md, "CLI start-up"). Checked in
fresh interpreters, by the modules loaded, never by a duration.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data

HEAVY = ("torch", "numpy", "matplotlib", "nnx_api.model")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> tuple[Path, list[str]]:
    """A runs root holding two committed runs."""
    runs = tmp_path_factory.mktemp("startup") / "runs"
    x, y = tiny_data()
    ids = []
    for epochs in (2, 3):
        nnx.set_seed(0)
        model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
        params = nnx.NNTrainParams(n_epochs=epochs, seed=0, train_loader=batches(x, y, 16), val_loader=batches(x, y, 24),
                                   progress=False)
        ids.append(model.train(params, root=runs).id)
    return runs, ids


def fresh(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter; it prints the heavy modules it loaded, last."""
    tail = f"import sys; print('loaded:', sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", f"{code}\n{tail}"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return fresh(f"from nnx_api.cli import main\nassert main({list(argv)!r}) == 0")


@pytest.mark.parametrize("argv", [("--help",), ("runs", "--help"), ("runs", "list", "--help"), ("--version",)])
def test_help_imports_no_torch(argv):
    done = cli(*argv)
    assert done.stdout.splitlines()[-1] == "loaded: []"
    assert "nnx" in done.stdout


def test_runs_list_of_a_real_root_imports_no_torch(root):
    runs, ids = root
    done = cli("runs", "list", "--root", str(runs))
    lines = done.stdout.splitlines()
    assert lines[-1] == "loaded: []"
    assert lines[0].split()[0] == "ID" and sorted(line.split()[0] for line in lines[1:-1]) == sorted(i[:8] for i in ids)
    assert all(line.split()[-1] == "completed" for line in lines[1:-1])


def test_show_and_compare_import_no_torch_and_verify_loads_it_to_decode(root):
    runs, ids = root
    shown = cli("runs", "show", ids[0][:8], "--root", str(runs))
    assert shown.stdout.startswith(f"run {ids[0]}\n") and shown.stdout.splitlines()[-1] == "loaded: []"
    compared = cli("runs", "compare", *(i[:8] for i in ids), "--root", str(runs))
    assert "train.n_epochs" in compared.stdout and compared.stdout.splitlines()[-1] == "loaded: []"
    verified = cli("runs", "verify", ids[0][:8], "--root", str(runs))  # decodes every blob: torch's safe loader
    assert f"run {ids[0]}: OK" in verified.stdout and "'torch'" in verified.stdout.splitlines()[-1]


def test_importing_the_package_binds_nothing_until_a_public_name_is_used():
    done = fresh(
        "import sys\nimport nnx_api as nnx\n"
        "assert 'torch' not in sys.modules and 'NNModel' not in vars(nnx)\n"
        "assert nnx.MonitorSpec is sys.modules['nnx_core.monitor_spec'].MonitorSpec\n"
        # the first use imported everything the eager package did and bound every name
        "assert [n for n in nnx.__all__ if n not in vars(nnx)] == [*nnx._LAZY, *nnx._LAZY_MODULES, "
        "*sorted(set(nnx._OUT_OF_SCOPE) - nnx._UNLISTED)]\n"
        "assert nnx.NNModel is sys.modules['nnx_api.model'].NNModel and nnx.launch is sys.modules['nnx_api.launch']\n"
        "assert set(nnx.__all__) <= set(dir(nnx))\n"
    )
    assert "'torch'" in done.stdout.splitlines()[-1]
    star = fresh("from nnx_api import *\nassert NNRun.__name__ == 'NNRun' and ExperimentPlan.__name__ == 'ExperimentPlan'")
    assert "'torch'" in star.stdout.splitlines()[-1]


def test_the_lazy_table_matches_the_type_checking_imports():
    """``_NAMES`` (what runs) and the ``TYPE_CHECKING`` imports (what type checkers read) name the
    same objects; the package's modules bound only as a side effect are in ``_MODULES``."""
    tree = ast.parse(Path(nnx.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    declared: dict[str, tuple[str, str | None]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names:
            own = node.module == "nnx_api"
            declared[alias.asname or alias.name] = (f"nnx_api.{alias.name}", None) if own else (node.module, alias.name)
    table = nnx._NAMES
    side_effect = {name: table[name] for name in set(table) - set(declared)}
    assert {name: table[name] for name in declared} == declared
    assert side_effect == {name: (f"nnx_api.{name}", None) for name in side_effect}
    assert set(side_effect) < set(nnx._MODULES)
    unbound = ["TensorBoardCallback", "WandbCallback", "ExperimentPlan", "FitResult", "plans", "search"]  # bound on first use
    assert nnx.__all__ == sorted(table) + unbound + sorted(set(nnx._OUT_OF_SCOPE) - nnx._UNLISTED)  # + placeholders
