"""Exporters: ONNX (``NNModel.to_onnx``) and safetensors (``export_safetensors``).

ONNX uses PyTorch's TorchScript-based exporter by default (``dynamo=False``): it needs no package
beyond ``onnx`` and gives a graph with a dynamic batch axis. ``dynamo=True`` uses the
``torch.export``-based exporter instead (it also needs ``onnxscript``, in the same extra). The exported file is checked with
``onnx.checker``. ONNX Runtime parity (outputs equal within rtol 1e-4 / atol 1e-5 on CPU for
several batch sizes) is what the test suite proves for the built-in MLP; ``check_onnx_parity``
runs the same comparison for any model.

safetensors holds a state dict as plain tensors (no pickle), with string metadata: NNx writes
the run id, tag, epoch and checkpoint SHA-256 so the file says where it came from.
Both are optional extras: ``pip install "nnx[export]"``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from nnx_core.errors import ParamsError
from nnx_adapters.extras import require
from nnx_adapters.pytorch.batches import restored_modes, to_device
from nnx_api.runs.run import NNRun

DEFAULT_OPSET = 17


def to_onnx(
    model: Any,
    path: str | os.PathLike[str],
    example_input: Any,
    *,
    opset: int = DEFAULT_OPSET,
    input_names: Sequence[str] = ("input",),
    output_names: Sequence[str] = ("output",),
    dynamic_batch: bool = True,
    check: bool = True,
    dynamo: bool = False,
) -> Path:
    """Export ``model.net`` (in eval mode; each submodule's mode is restored afterwards) to an
    ONNX file traced on ``example_input`` (a tensor or a tuple of tensors). The first axis of
    every input and output is dynamic unless ``dynamic_batch=False``. ``dynamo=True`` selects
    torch's ``torch.export``-based exporter (needs ``onnxscript``); the default is the
    TorchScript-based one. Returns the path."""
    require("onnx", "export", "to_onnx")
    import onnx

    if dynamo:
        require("onnxscript", "export", "to_onnx(dynamo=True)")

    net = model.net
    device = getattr(model, "device", None) or next(net.parameters()).device
    args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    args = tuple(to_device(a, device) for a in args)
    inputs = list(input_names) if len(input_names) == len(args) else [f"input_{i}" for i in range(len(args))]
    outputs = list(output_names)
    axes = {name: {0: "batch"} for name in (*inputs, *outputs)} if dynamic_batch else None
    target = Path(path)
    if target.parent != Path(""):
        target.parent.mkdir(parents=True, exist_ok=True)
    names = {"opset_version": opset, "input_names": inputs, "output_names": outputs}
    with restored_modes(net), warnings.catch_warnings():
        net.eval()
        if dynamo:
            _export_dynamo(net, args, target, names, dynamic_batch)
        else:
            # the TorchScript exporter is the default on purpose (no onnxscript needed): silence its notices
            warnings.filterwarnings("ignore", ".*legacy TorchScript-based ONNX export.*", DeprecationWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
            torch.onnx.export(net, args, str(target), dynamo=False, dynamic_axes=axes, **names)
    if check:
        onnx.checker.check_model(str(target))
    return target


def _export_dynamo(
    net: torch.nn.Module, args: tuple[Any, ...], target: Path, names: dict[str, Any], dynamic_batch: bool
) -> None:
    """The ``torch.export``-based exporter. A one-row example would be specialised to batch 1
    (``torch.export`` treats sizes 0 and 1 as constants), so it is traced on the row twice."""
    shapes = None
    if dynamic_batch:
        args = tuple(torch.cat([a, a]) if a.dim() and a.shape[0] == 1 else a for a in args)
        batch = torch.export.Dim("batch")
        shapes = tuple({0: batch} for _ in args)
    quiet = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript")]
    levels = [logger.level for logger in quiet]
    try:  # its progress lines, registry notices and version-converter remarks are not the caller's
        for logger in quiet:
            logger.setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            torch.onnx.export(net, args, str(target), dynamo=True, dynamic_shapes=shapes, verbose=False, **names)
    finally:
        for logger, level in zip(quiet, levels, strict=True):
            logger.setLevel(level)


def check_onnx_parity(
    model: Any,
    path: str | os.PathLike[str],
    batches: Sequence[Any],
    *,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> list[float]:
    """Run each batch through ONNX Runtime (CPUExecutionProvider, one thread) and the PyTorch
    model; raise AssertionError on the first mismatch. Returns the max absolute difference of each."""
    ort = require("onnxruntime", "export", "check_onnx_parity")
    import numpy as np

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    diffs = []
    for batch in batches:
        args = tuple(batch) if isinstance(batch, (tuple, list)) else (batch,)
        got = session.run(None, {n: a.detach().cpu().numpy() for n, a in zip(names, args, strict=True)})[0]
        expected = np.asarray(model.predict(args if len(args) > 1 else args[0]).logits, dtype=np.float32)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=f"batch of {len(args[0])} rows")
        diffs.append(float(np.max(np.abs(got - expected))) if got.size else 0.0)
    return diffs


def export_safetensors(
    source: Any,
    path: str | os.PathLike[str],
    *,
    tag: str = "best",
    root: str | os.PathLike[str] | None = None,
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """Write a state dict as a ``.safetensors`` file and return its path.

    ``source`` is a run id or ``NNRun`` (its checkpoint ``tag`` is read and SHA-256-verified;
    metadata names run, tag, epoch and blob hash), an ``NNModel`` or a ``torch.nn.Module``
    (its current weights). ``metadata`` adds string entries."""
    st = require("safetensors.torch", "export", "export_safetensors", package="safetensors")
    meta: dict[str, str] = {"format": "pt"}
    if isinstance(source, (str, NNRun)):
        run = source if isinstance(source, NNRun) else NNRun.load(source, root)
        checkpoint = run.require_checkpoint(tag)
        state = checkpoint.weights()
        ref = checkpoint.manifest.blobs.get("state")
        meta.update({"nnx.run_id": run.id, "nnx.tag": checkpoint.tag, "nnx.epoch": str(checkpoint.epoch)})
        if ref is not None:
            meta["nnx.sha256"] = ref.sha256
    else:
        net = getattr(source, "net", source)
        if not isinstance(net, torch.nn.Module):
            kind = type(source).__name__
            raise TypeError(f"export_safetensors needs a run id, NNRun, NNModel or nn.Module, got {kind}")
        state = net.state_dict()
    meta.update({str(k): str(v) for k, v in (metadata or {}).items()})
    # own, contiguous CPU copies: safetensors refuses shared or strided storage
    tensors = {name: t.detach().to("cpu").contiguous().clone() for name, t in state.items()}
    target = Path(path)
    if target.parent != Path(""):
        target.parent.mkdir(parents=True, exist_ok=True)
    st.save_file(tensors, str(target), metadata=meta)
    os.chmod(target, 0o666 & ~_umask())  # safetensors writes through a private (0600) temporary
    return target


def _umask() -> int:
    """The process's file-creation mask (read by setting it, then restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def load_safetensors(path: str | os.PathLike[str]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(state dict, metadata)`` of a ``.safetensors`` file."""
    st = require("safetensors", "export", "load_safetensors")
    tensors: dict[str, torch.Tensor] = {}
    with st.safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
        for key in f.keys():
            tensors[key] = f.get_tensor(key)
    return tensors, meta


def default_example_input(run: NNRun) -> torch.Tensor:
    """A one-row float input for a run of the built-in net (``input_dim`` from its config)."""
    net = run.config.get("net")
    if not isinstance(net, Mapping) or "input_dim" not in net:
        raise ParamsError(
            "example_input",
            f"run {run.id} trained a custom module: export it with NNModel.to_onnx(path, example_input)",
        )
    return torch.zeros(1, int(net["input_dim"]))


__all__ = ["check_onnx_parity", "default_example_input", "export_safetensors", "load_safetensors", "to_onnx"]
