"""A module of your own keeps one identity however its script was started (``python train.py``,
``from train import Net``, ``python -m``), and a load into another module says what differs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import nnx_api as nnx
from nnx_api.config import identity

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    """A user's training script: its own module, trained on a few rows."""
    import json, sys
    import torch
    from torch import nn
    import nnx_api as nnx


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 3)

        def forward(self, x):
            return self.body(x)


    def train(root):
        torch.manual_seed(0)
        x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
        model = nnx.NNModel(module=Net())
        params = nnx.NNTrainParams(n_epochs=1, optim=nnx.NNOptimParams(max_lr=0.1), progress=False,
                                   train_loader=[(x[:8], y[:8]), (x[8:], y[8:])], resume="auto")
        return model.train(params, root=root)


    if __name__ == "__main__":
        print(json.dumps({"id": train(sys.argv[1]).id}))
''')


def _run(args: list[str], cwd: Path) -> dict:
    out = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "NNX_PROGRESS": "0"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_script_and_an_import_of_it_train_one_run(tmp_path):
    """``python train.py`` and ``import train`` name the module ``train.Net``: one run id, so the
    second call returns the finished run instead of training another."""
    (tmp_path / "train.py").write_text(SCRIPT)
    root = tmp_path / "runs"
    as_script = _run(["train.py", str(root)], tmp_path)
    as_import = _run(["-c", f"import json, train; print(json.dumps({{'id': train.train({str(root)!r}).id}}))"], tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(SCRIPT)
    as_module = _run(["-m", "pkg.train", str(root)], tmp_path)
    as_package_import = _run(
        ["-c", f"import json; from pkg import train; print(json.dumps({{'id': train.train({str(root)!r}).id}}))"], tmp_path
    )
    assert as_script["id"] == as_import["id"]
    assert as_module["id"] == as_package_import["id"] != as_script["id"]  # pkg.train.Net is another class path
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == sorted({as_script["id"], as_module["id"]})


class Net(nn.Module):
    def __init__(self, width: int = 3) -> None:
        super().__init__()
        self.body = nn.Linear(4, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class Other(Net):
    """Another class with the same parameters."""


def _trained(root: Path) -> nnx.NNRun:
    torch.manual_seed(0)
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    model = nnx.NNModel(module=Net())
    params = nnx.NNTrainParams(n_epochs=1, optim=nnx.NNOptimParams(max_lr=0.1), progress=False,
                               train_loader=[(x[:8], y[:8]), (x[8:], y[8:])])
    return model.train(params, root=root)


def test_a_load_into_another_module_says_what_differs(tmp_path, recwarn):
    run = _trained(tmp_path)
    loaded = nnx.NNModel.from_checkpoint(run.id, root=tmp_path, module=Net())  # the same class: silent
    assert torch.equal(loaded.net.body.weight, run.checkpoint("last").weights()["body.weight"])
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]
    with pytest.warns(UserWarning, match=r"trained a .*test_module_identity\.Net; the given .*Other has the same parameter"):
        nnx.NNModel.from_checkpoint(run.id, root=tmp_path, module=Other())
    with pytest.raises(nnx.ResumeMismatchError, match=r"body\.weight: \[5, 4\] here, \[3, 4\] in the checkpoint"):
        nnx.NNModel.from_checkpoint(run.id, root=tmp_path, module=Net(width=5))


def test_a_fresh_run_says_where_the_run_of_its_earlier_class_name_is(tmp_path, monkeypatch):
    """Runs trained before a script's classes had their importable name were recorded under
    ``__main__.Net``: the same configuration now trains a fresh run, and says where the earlier
    one is and how to start from it."""
    monkeypatch.setattr(Net, "__module__", "__main__")
    monkeypatch.setattr(identity, "_main_module", lambda: None)  # the earlier naming: __main__.Net
    earlier = _trained(tmp_path)
    assert earlier.config["module"]["class"] == "__main__.Net"
    monkeypatch.setattr(identity, "_main_module", lambda: "train")  # now: the script's importable name
    with pytest.warns(UserWarning, match=rf"now named train\.Net .* is {earlier.id}\. .*resume_from_run_id='{earlier.id}'"):
        fresh = _trained(tmp_path)
    assert fresh.id != earlier.id and fresh.config["module"]["class"] == "train.Net"
    assert nnx.NNRun.load(earlier.id, tmp_path).idps  # the earlier run is untouched
