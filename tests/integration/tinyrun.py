"""A tiny seeded NNModel job shared by the crash tests and by ``train_script.py`` (their subprocess).

Everything that decides the final weights lives here, so an in-process run, a subprocess run and a
run resumed after any crash are built the same way: seed, then model, then loaders whose shuffling
generator is seeded too (``num_workers=0``). ``check_committed_state`` is the on-disk invariant
every crash test applies to what survived. ``augmenting_workers=N`` trains on ``Augmenting`` rows
instead (randomness drawn in ``__getitem__``) through a ``DataLoader`` with N worker processes,
8 rows a batch: the job of the mid-epoch crash tests.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from nnx_core.commit import LAST, RunFiles
from nnx_core.eager_history import parse_history
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.paths import TMP_PREFIX
import nnx_api as nnx

N_EPOCHS = 4
FILE_OPS = ("write", "fsync", "replace", "unlink")  # the os calls through which FileStorage changes the disk


def data(n: int = 96, d: int = 6, classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, d, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return x, y


class Augmenting(Dataset):
    """``data()``'s rows plus noise drawn in ``__getitem__`` from torch, ``random`` and NumPy."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        noise = 0.1 * torch.randn(self.x.shape[1]) + 0.01 * random.random() + 0.01 * float(np.random.rand())
        return self.x[i] + noise, self.y[i]


def build(
    n_epochs: int = N_EPOCHS, *, augmenting_workers: int | None = None, **train_kw: Any
) -> tuple[nnx.NNModel, nnx.NNTrainParams]:
    """The 'script': seed, model, shuffled loader with its own seeded generator, validation loader."""
    x, y = data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=x.shape[1], output_dim=3, hidden_dims=(16,)), nnx.NNModelParams())
    if augmenting_workers is None:
        train_loader = DataLoader(
            TensorDataset(x, y), batch_size=16, shuffle=True, num_workers=0, generator=torch.Generator().manual_seed(7)
        )
    else:
        train_loader = DataLoader(
            Augmenting(x, y), batch_size=8, shuffle=True, num_workers=augmenting_workers,
            generator=torch.Generator().manual_seed(7), timeout=120 if augmenting_workers else 0,
        )
    val_loader = DataLoader(TensorDataset(x[:48], y[:48]), batch_size=24, num_workers=0)
    kw: dict[str, Any] = {"resume": "auto", **train_kw}
    params = nnx.NNTrainParams(
        n_epochs=n_epochs, seed=0, train_loader=train_loader, val_loader=val_loader, progress=False, **kw
    )
    return model, params


def train(
    root: os.PathLike[str] | str, n_epochs: int = N_EPOCHS, callbacks: Any = None, **train_kw: Any
) -> tuple[nnx.NNModel, nnx.NNRun]:
    """Run the script once; return the (trained) model and its run."""
    model, params = build(n_epochs, **train_kw)
    return model, model.train(params, callbacks=callbacks, root=root)


def run_id(n_epochs: int = N_EPOCHS) -> str:
    """The id the script's run gets (its content address), without training."""
    model, params = build(n_epochs)
    return nnx.NNRun(config=model.run_config(params, None), root=".").id


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Bit-identical state dicts (same keys, ``torch.equal`` tensors)."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def storage_temporaries(storage: FileStorage, folder: str) -> list[str]:
    """Temporaries a reader could see through the public listing (must always be none)."""
    seen = []
    for name in storage.list(folder):
        path = f"{folder}/{name}"
        if name.startswith(TMP_PREFIX):
            seen.append(path)
        elif not storage.exists(path):
            seen += storage_temporaries(storage, path)
    return seen


def disk_temporaries(root: os.PathLike[str] | str) -> list[str]:
    """Every ``.tmp-*`` file physically under ``root`` (stale ones a hard kill may leave)."""
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.startswith(TMP_PREFIX)]


def check_committed_state(root: os.PathLike[str] | str, rid: str) -> int | None:
    """Assert the load rules on what is on disk; return LAST's epoch (None: nothing committed).

    * the run loads (``NNRun.load``) — a ``CorruptRunError`` here is a failure of the protocol;
      a run that was never admitted (no run.yaml) counts as nothing committed;
    * the history readers see holds exactly epochs ``0..LAST`` (newer rows are truncated);
    * every tag names an epoch ≤ LAST, and each of its blobs verifies against its SHA-256 and
      decodes with the safe loader;
    * no temporary is visible through the store's listing.
    """
    storage = FileStorage(root)
    files = RunFiles(storage, rid)
    assert storage_temporaries(storage, rid) == []
    if not files.exists():
        return None
    run = nnx.NNRun.load(rid, root)
    last = files.read_tag(LAST)
    visible = sorted({idp.epoch_idx for idp in run.idps})
    if last is None:
        assert visible == []
        assert files.tags() == []
        return None
    assert visible == list(range(last.epoch + 1)), (visible, last.epoch)
    raw = parse_history(storage.read(files.history))
    assert [r for r in raw if r.epoch_idx <= last.epoch] == list(run.idps)
    for tag in files.tags():
        manifest = files.read_tag(tag)
        assert manifest is not None and manifest.epoch <= last.epoch, (tag, manifest)
        for ref in manifest.blobs.values():
            torch_state.decode(files.read_blob(ref, verify=True), where=f"{rid}:{tag}")
    return last.epoch
