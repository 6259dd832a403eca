"""Checkpoint codec and RNG streams: training state as tensors and plain types only.

Payloads are written with ``torch.save`` and read with ``torch.load(weights_only=True)``, so a
crafted blob carrying a pickled callable is refused without running it. RNG states are converted
to tensors/lists (numpy's and Python's tuples included) so they pass the safe loader.
"""

from __future__ import annotations

import io
import os
import pickle
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch

from nnx_core.errors import CorruptRunError, ParamsError
from nnx_core.ports import SizedProducer
from nnx_core.validate import check_int
from nnx_adapters.pytorch.staging import tensors

PAYLOAD_FORMAT = 1


def encode(payload: Mapping[str, Any]) -> bytes:
    """Serialize a payload mapping (tensors and plain types) to bytes."""
    buffer = io.BytesIO()
    torch.save({"nnx_payload_format": PAYLOAD_FORMAT, **payload}, buffer)
    return buffer.getvalue()


def encoder(payload: Mapping[str, Any]) -> Callable[[Any], None]:
    """A producer writing the encoded payload to a sink (for ``Storage.write_blob``), sized by
    its tensors' storages (``SizedProducer``: a store may choose how to write it by size)."""

    def produce(sink: Any) -> None:
        torch.save({"nnx_payload_format": PAYLOAD_FORMAT, **payload}, sink)

    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors(payload)}
    return SizedProducer(produce, sum(storages.values()))


def safe_load(data: bytes, *, where: str = "checkpoint") -> Any:
    """``torch.load(weights_only=True)`` of ``data`` onto the CPU: tensors and plain types only,
    never code; anything the safe loader refuses is CorruptRunError."""
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError, TypeError) as exc:
        raise CorruptRunError(
            f"{where}: payload refused by the safe loader ({type(exc).__name__}: {str(exc)[:200]}); "
            "NNx never executes code from a checkpoint"
        ) from exc


def decode(data: bytes, *, where: str = "checkpoint") -> dict[str, Any]:
    """Load a payload safely (never executes code); anything else is CorruptRunError."""
    payload = safe_load(data, where=where)
    if not isinstance(payload, dict) or payload.get("nnx_payload_format") != PAYLOAD_FORMAT:
        raise CorruptRunError(f"{where}: not an NNx payload (format {PAYLOAD_FORMAT} expected)")
    return payload


def _generators(loaders: Iterable[Any]) -> list[torch.Generator]:
    """Explicit torch generators of loaders and their samplers, in a stable order."""
    found: list[torch.Generator] = []
    for loader in loaders:
        for owner in (loader, getattr(loader, "sampler", None), getattr(loader, "batch_sampler", None)):
            gen = getattr(owner, "generator", None)
            if isinstance(gen, torch.Generator) and all(gen is not g for g in found):
                found.append(gen)
        inner = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
        gen = getattr(inner, "generator", None)
        if isinstance(gen, torch.Generator) and all(gen is not g for g in found):
            found.append(gen)
    return found


def capture_rng(loaders: Iterable[Any] = ()) -> dict[str, Any]:
    """Every RNG stream a training step can draw from: Python, NumPy, torch CPU/CUDA, loaders."""
    version, internal, gauss = random.getstate()
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        # through NumPy: the same int64 tensor as torch.tensor(internal) makes, in a third of its time
        "python": {"version": version, "internal": torch.from_numpy(np.array(internal, dtype=np.int64)), "gauss": gauss},
        "numpy": {
            "kind": np_kind,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "gauss": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
        "loaders": [g.get_state() for g in _generators(loaders)],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: Mapping[str, Any], loaders: Iterable[Any] = ()) -> None:
    """Put back every stream captured by :func:`capture_rng`."""
    py = state["python"]
    random.setstate((py["version"], tuple(int(v) for v in py["internal"].tolist()), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state(
        (npy["kind"], npy["keys"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"], npy["gauss"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    gens = _generators(loaders)
    saved = state.get("loaders", [])
    if len(saved) != len(gens):
        raise CorruptRunError(
            f"the checkpoint holds {len(saved)} loader generator(s) but the loaders have {len(gens)}; "
            "resume with loaders built the same way"
        )
    for gen, gen_state in zip(gens, saved, strict=True):
        gen.set_state(gen_state)
    if "reseed" in state:  # a rank new to a resharded run: its own streams, derived (CheckpointPayload.reshard_view)
        seed = int(state["reseed"])
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)


def set_seed(seed: int, strict: bool = False) -> None:
    """Pin every RNG a training step draws from: Python ``random``, NumPy and torch (CPU and every
    CUDA device); write ``PYTHONHASHSEED`` (inherited by spawned workers and subprocesses only:
    this interpreter's hash seed was fixed at start-up); turn cuDNN autotuning off and its
    deterministic mode on. ``strict=True`` also sets ``CUBLAS_WORKSPACE_CONFIG`` (when unset) and
    ``torch.use_deterministic_algorithms(True)``: bit-for-bit kernels, slower, and an error for
    operations without a deterministic implementation.
    """
    seed = check_int("set_seed.seed", seed, minimum=0)
    if not isinstance(strict, bool):
        raise ParamsError("set_seed.strict", f"must be True or False, got {strict!r}")
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)  # every CUDA device too
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    if strict:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)


def dataloader_worker_init_fn(worker_id: int) -> None:
    """``DataLoader(worker_init_fn=dataloader_worker_init_fn)``: seed a worker's Python and NumPy
    streams from the seed torch gave the worker (its base seed plus ``worker_id``), so a seeded
    loader's workers draw the same numbers every run. Worker streams are still not part of a
    checkpoint: an exact resume needs ``num_workers=0``."""
    seed = (torch.initial_seed() + int(worker_id)) % (2**32)
    random.seed(seed)
    np.random.seed(seed)
