"""The data fingerprint: a cheap record of what each loader yields, kept with the run.

A loader is not part of the run id (only ``data_id=`` is), so without a record ``resume="auto"``
would return or continue a run trained on other data. Each loader's fingerprint is::

    rows      len(loader.dataset) for a map-style dataset (None otherwise)
    batches   len(loader) (None when the loader has no length; left out for NNx's sharded
              DDP loaders, whose per-rank batch count depends on the world size; None on
              either side is not compared)
    batch     the first batch's structure: shape and dtype of every tensor in it (a train
              loader with a fixed global batch: the group's batch, G rows, on any world size;
              a sharded validation loader: its batch size, whatever the share of each rank)
    sample    SHA-256 (16 hex digits) of a fixed sample of rows: up to SAMPLE_ROWS rows at evenly
              spaced indices of the dataset (always the first and the last), read with
              ``dataset[i]`` — or, for a loader without a map-style dataset (a list of batches,
              an IterableDataset), of the first batch

Cost, bounded whatever the data's size: one batch from the loader (its worker processes start
once, as for an epoch) and at most ``SAMPLE_ROWS`` ``dataset[i]`` reads. The sample's indices
depend only on the dataset's length, never on the shuffle order, and every read runs with the
Python, NumPy and torch RNGs seeded to a fixed value (random augmentations draw the same way each
time) and then put back as they were — with the loaders' own generators — so taking it changes
nothing about training (``take_first_batch``).

It is a check, not a proof: data changed only between sampled rows goes unnoticed. ``data_id=``
names the data in the run id, which is the reliable way to tell datasets apart.
"""

from __future__ import annotations

import contextlib
import hashlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from nnx_adapters.pytorch import state as torch_state
from nnx_api.training.roles import Sharded, ShardedValidation

SAMPLE_ROWS = 32
"""At most this many rows of a loader's dataset are hashed."""
_SEED = 0x5EED  # the fixed RNG seed every fingerprint read runs under


@contextlib.contextmanager
def untouched_rng(loaders: Sequence[Any]) -> Iterator[None]:
    """Run the block with Python / NumPy / torch seeded to a fixed value; afterwards every RNG
    stream — those and the loaders' generators — is exactly as it was before."""
    saved = torch_state.capture_rng(loaders)
    try:
        torch_state.set_seed(_SEED)
        yield
    finally:
        torch_state.restore_rng(saved, loaders)


def take_first_batch(loader: Any) -> Any:
    """The loader's first batch, leaving its iteration as it was: the RNG streams are put back
    (``untouched_rng``) and a DataLoader's persistent worker pool started for it is dropped, so
    the first epoch starts its workers with the same seeds as without this call. ``None`` when the
    loader yields nothing (the first epoch reports it)."""
    pool = getattr(loader, "_iterator", None)
    with untouched_rng([loader]):
        try:
            batch = next(iter(loader))
        except StopIteration:
            batch = None
        finally:
            if pool is None and getattr(loader, "_iterator", None) is not None:
                loader._iterator = None  # persistent workers: start afresh in epoch 0
    return batch


def dataset_of(loader: Any) -> Any:
    """The map-style dataset a loader reads (the whole set for NNx's sharded loaders), or None."""
    if isinstance(loader, ShardedValidation):
        dataset = loader.shard.dataset
    else:
        dataset = getattr(loader, "dataset", None)
    if dataset is None or not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        return None
    return dataset


def sample_indices(rows: int, limit: int = SAMPLE_ROWS) -> list[int]:
    """Up to ``limit`` evenly spaced row indices of ``0..rows-1``, first and last included."""
    if rows <= limit:
        return list(range(rows))
    return sorted({round(i * (rows - 1) / (limit - 1)) for i in range(limit)})


def structure(value: Any, rows: int | None = None) -> Any:
    """Shapes and dtypes of the tensors in a batch, nested as the batch is (YAML-safe); ``rows``:
    the batch dimension to record instead of the tensors' own (the group's rows per step)."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        shape = list(value.shape)
        if rows is not None and shape:
            shape[0] = rows
        return f"{type(value).__name__ if isinstance(value, np.ndarray) else 'tensor'}{shape} {value.dtype}"
    if isinstance(value, Mapping):
        return {str(k): structure(v, rows) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (tuple, list)):
        return [structure(v, rows) for v in value]
    return type(value).__name__


def _feed(digest: Any, value: Any) -> None:
    """Add ``value``'s content to ``digest`` (tensors and arrays by their bytes)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().to("cpu").contiguous()
        digest.update(f"t{list(t.shape)}{t.dtype}".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, np.ndarray):
        digest.update(f"a{list(value.shape)}{value.dtype}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, Mapping):
        for k in sorted(value, key=str):
            digest.update(f"k{k!s}".encode())
            _feed(digest, value[k])
    elif isinstance(value, (tuple, list)):
        digest.update(f"s{len(value)}".encode())
        for v in value:
            _feed(digest, v)
    elif isinstance(value, (str, bytes, int, float, bool, type(None))):
        digest.update(repr(value).encode())
    else:  # an object without a stable content (its repr may hold an address): its type only
        digest.update(type(value).__qualname__.encode())


def _rows(dataset: Any, index: list[int]) -> Any:
    tensors = getattr(dataset, "tensors", None)
    if isinstance(tensors, tuple) and all(isinstance(t, torch.Tensor) for t in tensors):  # TensorDataset: one gather
        rows = torch.as_tensor(index, dtype=torch.long)
        return [t[rows] for t in tensors]
    return [dataset[i] for i in index]


def _batch_rows(loader: Any) -> int | None:
    """The batch dimension a fingerprint records instead of the first batch's own, where that one
    depends on the world size: a fixed global batch's G rows (a train loader), or a sharded
    validation loader's batch size (a rank's first batch holds at most its share of the rows)."""
    if isinstance(loader, Sharded):
        return getattr(loader, "global_batch_size", None)
    if isinstance(loader, ShardedValidation):
        return loader.batch_size
    return None


def loader_fingerprint(loader: Any, first: Any) -> dict[str, Any]:
    """One loader's fingerprint (the module docstring); ``first``: its first batch."""
    dataset = dataset_of(loader)
    rows = len(dataset) if dataset is not None else None
    batches = None
    if not isinstance(loader, (Sharded, ShardedValidation)):  # a rank's share: its count follows the world size
        with contextlib.suppress(TypeError):
            batches = len(loader)
    digest = hashlib.sha256()
    if dataset is not None and rows:
        index = sample_indices(rows)
        with untouched_rng([loader]):
            _feed(digest, _rows(dataset, index))
        sampled = f"{len(index)} of {rows} rows"
    else:
        _feed(digest, first)
        sampled = "the first batch"
    return {  # the same on any world size (resume_mode="reshard")
        "rows": rows, "batches": batches, "batch": structure(first, _batch_rows(loader)), "sample": digest.hexdigest()[:16],
        "sampled": sampled,
    }


def data_fingerprint(loaders: Mapping[str, Any], firsts: Mapping[str, Any]) -> dict[str, Any]:
    """``{"train_loader": ..., "val_loader": ...}`` for the loaders given (None ones left out).
    The same loader object as both is warned about: validation would score the training data."""
    train = loaders.get("train_loader")
    if train is not None and train is loaders.get("val_loader"):
        warnings.warn(
            "val_loader is the same loader as train_loader: validation scores the training data, so BEST (and any "
            "monitor, early stopping or plateau schedule) is chosen on training data; pass a held-out val_loader, "
            "or leave val_loader out", UserWarning, stacklevel=3,
        )
    return {name: loader_fingerprint(loader, firsts.get(name)) for name, loader in loaders.items() if loader is not None}


__all__ = ["SAMPLE_ROWS", "data_fingerprint", "dataset_of", "loader_fingerprint", "sample_indices", "structure",
           "take_first_batch", "untouched_rng"]
