"""The path of one built-in batch, as docs/architecture.md names it: traced, not read.

A profiler hook records every Python function that runs while the session trains one batch of
the built-in step (from ``TrainingSession.train_epoch``'s call into the owner to its return);
the ``nnx_api`` files those functions live in are the batch's path. It must be the three files
the architecture page names, in that order of first visit.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx
from nnx_api.training import builtin_step

ROOT = Path(__file__).resolve().parents[3]
API = ROOT / "nnx_api"


def documented_path() -> list[str]:
    """The numbered files of the architecture page's "The path of one built-in batch" section."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## The path of one built-in batch", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `(nnx_api/[\w/]+\.py)`", section, flags=re.M)


def traced_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **train: Any) -> list[str]:
    """The nnx_api files, in order of first visit, of the built-in step's second batch."""
    seen: list[str] = []
    real = builtin_step.DefaultStep.step
    calls = {"n": 0}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(API):
                name = path.relative_to(ROOT).as_posix()
                if name not in seen:
                    seen.append(name)

    def step(self: Any, *args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] != 2:  # the first batch opens lazily built things; the second is the steady path
            return real(self, *args)
        seen.append("nnx_api/training/session.py")  # the caller: TrainingSession.train_epoch
        sys.setprofile(profile)
        try:
            return real(self, *args)
        finally:
            sys.setprofile(None)

    monkeypatch.setattr(builtin_step.DefaultStep, "step", step)
    torch.manual_seed(0)
    x, y = torch.randn(24, 4), torch.randint(0, 3, (24,))
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=1, train_loader=DataLoader(TensorDataset(x, y), batch_size=8), progress=False,
                               optim=nnx.NNOptimParams(name="sgd", max_lr=0.1), **train)
    model.train(params, root=tmp_path)
    assert calls["n"] == 3
    return seen


def test_the_architecture_page_names_three_files() -> None:
    assert documented_path() == [
        "nnx_api/training/session.py", "nnx_api/training/builtin_step.py", "nnx_api/training/epoch.py",
    ]


@pytest.mark.parametrize("train", [{}, {"metrics": (nnx.MetricSpec("accuracy"),)}], ids=["plain", "with-summary"])
def test_one_built_in_batch_visits_the_documented_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, train: dict) -> None:
    assert traced_path(tmp_path, monkeypatch, **train) == documented_path()


def test_the_trace_sees_a_longer_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The instrument can fail: a step that reaches into another nnx_api module shows up."""
    import types

    from nnx_api.training import steps

    real = builtin_step.DefaultStep.update

    def update(self: Any, state: Any, *args: Any) -> Any:
        steps.link_of(types.SimpleNamespace(report_update=None))  # one call into a fourth file
        return real(self, state, *args)

    monkeypatch.setattr(builtin_step.DefaultStep, "update", update)
    assert "nnx_api/training/steps.py" in traced_path(tmp_path, monkeypatch)
