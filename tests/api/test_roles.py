"""Declared roles (``nnx_api.training.roles``): who plays them, and who must not by accident."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset

from nnx_api.distributed.loaders import ShardedTrainLoader, ShardedValidationLoader
from nnx_api.training.roles import Sharded, ShardedValidation

DATA = TensorDataset(torch.zeros(10, 2), torch.zeros(10, dtype=torch.long))


def test_the_sharded_loaders_play_their_roles_and_only_their_own():
    train, val = ShardedTrainLoader(DATA, 4, "pad", 0, 0, 2), ShardedValidationLoader(DATA, 4, 1, 2)
    assert isinstance(train, Sharded) and not isinstance(train, ShardedValidation)
    assert isinstance(val, ShardedValidation) and not isinstance(val, Sharded)


@pytest.mark.parametrize(
    "other",
    [
        DataLoader(DATA, batch_size=4),
        DataLoader(DATA, batch_size=4, sampler=DistributedSampler(DATA, num_replicas=2, rank=0)),
        DistributedSampler(DATA, num_replicas=2, rank=0),
        Subset(DATA, [0, 1]),
        DATA,
        [(torch.zeros(2, 2), torch.zeros(2))],
    ],
    ids=["DataLoader", "DataLoader+DistributedSampler", "DistributedSampler", "Subset", "TensorDataset", "list"],
)
def test_other_loaders_do_not_match_by_accident(other):
    assert not isinstance(other, Sharded) and not isinstance(other, ShardedValidation)
