"""Staging: a consistent snapshot of a checkpoint payload, in buffers reused from commit to commit.

A background commit (``nnx_core.background``) writes the payload while training goes on changing
the parameters and the optimizer's state in place, so at its commit point the payload is copied
once. ``Staging.snapshot`` copies every tensor's whole storage into a host buffer and rebuilds the
tensor as the same view of the copy (same offset, sizes, strides, dtype): tensors sharing a
storage (tied weights) still share one, so ``torch.save`` writes the snapshot with exactly the
bytes it writes for the live state. Containers are rebuilt with their types (an ``OrderedDict``
keeps its ``_metadata``); other values are copied with ``copy.deepcopy``.

Buffers are kept by their place in the payload and reused while the size matches, so staging
memory is one state's and is not allocated again per commit. Until the next snapshot they hold the
last one: ``holds`` tells whether a payload is still byte for byte what it was then (at the end of
a call the final LAST refresh then has nothing new to write).

A CUDA tensor is copied into pinned host memory with ``non_blocking`` copies on a side stream,
waited for before the snapshot is handed over. A synchronous commit stages device tensors too
(``devices_only``, no pinning), so a checkpoint holds host tensors either way and both kinds of
commit write the same bytes.
"""

from __future__ import annotations

import collections
import copy
import pickle
from collections.abc import Mapping
from typing import Any

import torch


class Staging:
    """Reusable host buffers for one writer's payload snapshots."""

    def __init__(self, devices_only: bool = False) -> None:
        """``devices_only``: a payload without device (CUDA) tensors is handed through as it is (a
        synchronous commit: its checkpoint then holds host tensors, as an asynchronous one's)."""
        self.devices_only = devices_only
        self._buffers: list[tuple[torch.UntypedStorage, bool]] = []  # (buffer, pinned) by the storage's place in the payload
        self._stream: Any = None  # the CUDA side stream of device-to-host copies
        self.last: Any = None  # the last snapshot (views of the buffers)

    def snapshot(self, payload: Any) -> Any:
        """``payload`` with every tensor in it copied into this staging's buffers (module docstring)."""
        copies: dict[int, torch.UntypedStorage] = {}  # source storage (its C++ identity) → its copy
        cuda = any(t.is_cuda for t in tensors(payload))
        if self.devices_only and not cuda:
            return payload
        if cuda and self._stream is None:
            self._stream = torch.cuda.Stream()
        if cuda:
            self._stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self._stream):
                staged = self._copy(payload, copies)
            self._stream.synchronize()
        else:
            staged = self._copy(payload, copies)
        self.last = staged
        return staged

    def holds(self, payload: Any) -> bool:
        """Whether the last snapshot is still exactly ``payload``: the same containers and keys,
        values that pickle alike, every tensor the same view of a storage whose bytes equal its
        copy's (storages shared alike), so ``torch.save`` writes the same bytes for both. False
        when unsure (a CUDA tensor, another kind of tensor, no snapshot yet)."""
        try:
            return self.last is not None and _same(payload, self.last, {})
        except Exception:  # anything unexpected: not known to be the same
            return False

    def _copy(self, value: Any, copies: dict[int, torch.UntypedStorage]) -> Any:
        if isinstance(value, torch.Tensor):
            return self._tensor(value, copies)
        if isinstance(value, Mapping):
            out = collections.OrderedDict() if isinstance(value, collections.OrderedDict) else {}
            for key, item in value.items():
                out[key] = self._copy(item, copies)
            if hasattr(value, "_metadata"):
                out._metadata = copy.deepcopy(value._metadata)  # type: ignore[union-attr]
            return out if type(value) in (dict, collections.OrderedDict) else _retyped(value, out)
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            return type(value)(self._copy(item, copies) for item in value)
        return copy.deepcopy(value)

    def _tensor(self, tensor: torch.Tensor, copies: dict[int, torch.UntypedStorage]) -> torch.Tensor:
        if type(tensor) not in (torch.Tensor, torch.nn.Parameter) or tensor.is_sparse or tensor.layout != torch.strided:
            return tensor.detach().clone().cpu() if not isinstance(tensor, torch.nn.Parameter) else copy.deepcopy(tensor)
        source = tensor.untyped_storage()
        key = source._cdata
        staged = copies.get(key)
        if staged is None:
            staged = copies[key] = self._buffer(len(copies), source)
        view = torch.empty(0, dtype=tensor.dtype).set_(staged, tensor.storage_offset(), tensor.size(), tensor.stride())
        if isinstance(tensor, torch.nn.Parameter):
            return torch.nn.Parameter(view, requires_grad=tensor.requires_grad)
        return view.requires_grad_(tensor.requires_grad) if tensor.is_leaf else view

    def _buffer(self, place: int, source: torch.UntypedStorage) -> torch.UntypedStorage:
        """The host buffer at ``place``, (re)allocated when its size or kind changed, filled from ``source``."""
        size, pin = source.nbytes(), source.device.type == "cuda" and not self.devices_only
        while len(self._buffers) <= place:
            self._buffers.append((torch.UntypedStorage(0), False))
        buffer, pinned = self._buffers[place]
        if buffer.nbytes() != size or pinned != pin:
            buffer = torch.UntypedStorage(size, device="cpu")
            if pin:
                buffer = buffer.pin_memory()
            self._buffers[place] = (buffer, pin)
        _words(buffer, size).copy_(_words(source, size), non_blocking=pin)
        return buffer


def _same(live: Any, staged: Any, pairs: dict[int, int]) -> bool:
    """``Staging.holds`` for one value; ``pairs``: live storage → its staged copy and (negated
    key) staged copy → live storage, seen so far."""
    if type(live) is not type(staged):
        return False
    if isinstance(live, torch.Tensor):
        if type(live) not in (torch.Tensor, torch.nn.Parameter) or live.is_cuda or live.layout != torch.strided:
            return False
        if (live.dtype, live.size(), live.stride(), live.storage_offset(), live.requires_grad) != (
            staged.dtype, staged.size(), staged.stride(), staged.storage_offset(), staged.requires_grad
        ):
            return False
        source, copy_ = live.untyped_storage(), staged.untyped_storage()
        if source._cdata in pairs or -copy_._cdata in pairs:  # shared alike both ways, or not the same
            return pairs.get(source._cdata) == copy_._cdata and pairs.get(-copy_._cdata) == source._cdata
        pairs[source._cdata], pairs[-copy_._cdata] = copy_._cdata, source._cdata
        size = source.nbytes()
        return size == copy_.nbytes() and torch.equal(_words(source, size), _words(copy_, size))
    if isinstance(live, Mapping):
        if list(live) != list(staged) or getattr(live, "_metadata", None) != getattr(staged, "_metadata", None):
            return False
        return all(_same(live[k], staged[k], pairs) for k in live)
    if isinstance(live, (list, tuple)):
        return len(live) == len(staged) and all(_same(a, b, pairs) for a, b in zip(live, staged, strict=True))
    return pickle.dumps(live, protocol=2) == pickle.dumps(staged, protocol=2)  # 0.0 and -0.0 differ


_WORDS = (torch.int64, torch.int32, torch.int16, torch.uint8)


def _words(storage: torch.UntypedStorage, size: int) -> torch.Tensor:
    """A storage's ``size`` bytes as a tensor of the widest integer words that tile them (no copy):
    copied as words, a storage copies about a fifth faster than as bytes (``UntypedStorage.copy_``),
    with the same bytes; compared as words, equal exactly when the bytes are."""
    dtype = next(d for d in _WORDS if size % d.itemsize == 0)
    return torch.empty(0, dtype=dtype, device=storage.device).set_(storage, 0, (size // dtype.itemsize,))


def tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in ``value`` (mappings, lists and tuples walked), in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for item in value.values() for t in tensors(item)]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors(item)]
    return []


def _retyped(original: Mapping[str, Any], items: dict[str, Any]) -> Any:
    """A mapping of another type rebuilt with its copied items (a deep copy when it cannot be)."""
    try:
        return type(original)(items)
    except TypeError:
        return copy.deepcopy(original)
