"""The data fingerprint (``nnx_api.training.fingerprint``) under a world-size change: the same data
on another number of ranks is the same data (``resume_mode="reshard"``), other data is not. (A
train loader with a fixed global batch: tests/integration/test_multinode.py's reshard.)"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import TensorDataset

from nnx_core.admission import data_refusal
from nnx_api.distributed.loaders import ShardedValidationLoader
from nnx_api.training.fingerprint import data_fingerprint, take_first_batch


def dataset(rows: int, shift: float = 0.0) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(rows, 4, generator=g) + shift, torch.randint(0, 3, (rows,), generator=g))


def fingerprint(world_size: int, rank: int = 0, val_rows: int = 360, val_batch: int = 256, shift: float = 0.0) -> dict:
    loaders = {"val_loader": ShardedValidationLoader(dataset(val_rows, shift), val_batch, rank, world_size)}
    return data_fingerprint(loaders, {k: take_first_batch(v) for k, v in loaders.items()})


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_a_sharded_validation_loader_on_another_world_size_is_the_same_data(world_size: int) -> None:
    """360 rows in batches of 256: one process's first batch holds 256 rows, a rank of 2 holds 180."""
    one = fingerprint(1)
    assert data_refusal("run", one, fingerprint(world_size)) is None
    assert data_refusal("run", fingerprint(world_size), one) is None
    assert one["val_loader"]["batch"] == fingerprint(world_size, rank=world_size - 1)["val_loader"]["batch"]


def test_other_validation_data_is_still_refused_on_another_world_size() -> None:
    assert data_refusal("run", fingerprint(1), fingerprint(2, val_rows=300)) is not None
    assert data_refusal("run", fingerprint(1), fingerprint(2, shift=1.0)) is not None
    assert data_refusal("run", fingerprint(1), fingerprint(2, val_batch=128)) is not None
