"""Batch helpers shared by every torch step: split a batch, move it to a device, call the net.

* ``lookahead(loader)``: ``(batch, is_last)`` pairs without ``len``.
* ``split_batch``, ``batch_parts``: a batch's inputs and targets (the model's ``batch_adapter``
  when it has one, else an ``(inputs, targets)`` pair).
* ``to_device``: a tensor, or a tuple/list/mapping of tensors, on a device.
* ``forward``, ``net_output``: call a net on a batch's inputs.
* ``restored_modes``: run inference without changing any submodule's train/eval flag.
* ``saved_buffers``: a copy of a net's buffers, to put back after a call that moved them.

``nnx_api.training.steps`` re-exports them for user step functions.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from nnx_core.errors import TrainingInputError

__all__ = [
    "batch_parts", "forward", "lookahead", "net_output", "restored_modes", "saved_buffers", "split_batch", "to_device",
]


def lookahead(loader: Any) -> Iterator[tuple[Any, bool]]:
    """``(batch, is_last)`` pairs, knowing the last batch without ``len``."""
    it = iter(loader)
    try:
        current = next(it)
    except StopIteration:
        return
    for nxt in it:
        yield current, False
        current = nxt
    yield current, True


def split_batch(batch: Any) -> tuple[Any, Any]:
    """``(inputs, targets)`` of a batch given as a 2-sequence."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TrainingInputError(
            f"a batch must be (inputs, targets), got {type(batch).__name__}"
            + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else "")
            + (" (no target)" if isinstance(batch, (tuple, list)) and len(batch) < 2 else "")
            + "; use a custom train_step_fn for other batch layouts"
        )
    return batch[0], batch[1]


def to_device(value: Any, device: torch.device) -> Any:
    """Move a tensor (or a tuple/list/mapping of tensors) to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True) if value.device != device else value
    if isinstance(value, (tuple, list)):
        return type(value)([to_device(v, device) for v in value])
    if isinstance(value, Mapping):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def batch_parts(model: Any, batch: Any) -> tuple[tuple[Any, ...], dict[str, Any], Any]:
    """``(positional inputs, keyword inputs, target)`` of one batch: the model's
    ``batch_adapter`` splits it when it has one, else it is an ``(inputs, targets)`` pair."""
    adapter = getattr(model, "batch_adapter", None)
    if adapter is not None:
        return adapter.split(batch)
    inputs, target = split_batch(batch)
    return (tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)), {}, target


def net_output(model: Any, net: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> torch.Tensor:
    """``net(*args, **kwargs)``, its logits picked by the model's ``batch_adapter`` if any."""
    out = net(*args, **kwargs)
    adapter = getattr(model, "batch_adapter", None)
    return out if adapter is None else adapter.output(out)


def forward(net: Any, inputs: Any) -> torch.Tensor:
    """``net(*inputs)`` for a tuple/list of inputs, else ``net(inputs)``."""
    return net(*inputs) if isinstance(inputs, (tuple, list)) else net(inputs)


@contextlib.contextmanager
def restored_modes(net: torch.nn.Module) -> Iterator[None]:
    """Record every submodule's train/eval flag and restore them afterwards."""
    flags = [(m, m.training) for m in net.modules()]
    try:
        yield
    finally:
        for module, flag in flags:
            module.training = flag


def saved_buffers(net: torch.nn.Module) -> Callable[[], None]:
    """A copy of every buffer of ``net`` now (running statistics, a hook's counter); calling the
    result puts them back in place."""
    saved = [(buffer, buffer.detach().clone()) for buffer in net.buffers()]

    def put_back() -> None:
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)

    return put_back
