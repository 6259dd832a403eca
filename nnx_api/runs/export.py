"""Exporters: ONNX (``NNModel.to_onnx``) and safetensors (``export_safetensors``).

ONNX uses PyTorch's TorchScript-based exporter by default (``dynamo=False``): it needs no package
beyond ``onnx`` and gives a graph with a dynamic batch axis. ``dynamo=True`` uses the
``torch.export``-based exporter instead (it also needs ``onnxscript``, in the same extra). The exported file is checked with
``onnx.checker``. ``torch.onnx.export``'s own keywords are passed through where they mean the same
thing in NNx's export and refused by name (``ParamsError``) where they do not, before anything is
written (``_check_options``; the table is in docs/export.md). ONNX Runtime parity (outputs equal within rtol 1e-4 / atol 1e-5 on CPU for
several batch sizes) is what the test suite proves for the built-in MLP; ``check_onnx_parity``
runs the same comparison for any model.

safetensors holds a state dict as plain tensors (no pickle), with string metadata: NNx writes
the run id, tag, epoch and checkpoint SHA-256 so the file says where it came from.
Both are optional extras: ``pip install "nnx[export]"``.
"""

from __future__ import annotations

import contextlib
import difflib
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

# torch.onnx.export's keywords (torch 2.13), each decided once (docs/export.md, "torch's keywords").
NNX_KEYWORDS = ("path", "example_input", "opset", "opset_version", "input_names", "output_names",
                "dynamic_batch", "check", "dynamo")
BOTH_EXPORTERS = ("verbose", "export_params", "keep_initializers_as_inputs")  # passed through, as torch means them
TORCHSCRIPT_ONLY = ("dynamic_axes", "do_constant_folding", "training", "operator_export_type", "custom_opsets",
                    "export_modules_as_functions", "autograd_inlining")  # passed through with dynamo=False
DYNAMO_ONLY = ("dynamic_shapes", "external_data", "custom_translation_table", "optimize", "verify", "report",
               "profile", "dump_exported_program", "artifacts_dir")  # passed through with dynamo=True
BOOLEANS = ("verbose", "export_params", "keep_initializers_as_inputs", "do_constant_folding", "autograd_inlining",
            "external_data", "optimize", "verify", "report", "profile", "dump_exported_program")
REFUSED = {  # torch's keywords that mean something else in NNx, with NNx's way
    "model": "the model is what to_onnx is called on (NNModel.to_onnx exports its own net)",
    "f": "NNx's name for the output file is `path`: to_onnx(path, example_input)",
    "args": "NNx's name for the example inputs is `example_input` (a tensor or a tuple of tensors)",
    "kwargs": "NNx traces net(*example_input) as predict calls it: give every input positionally in example_input",
}
NNX_NAMES = {"opset_version": "opset"}


def _check_options(options: dict[str, Any], dynamo: bool, dynamic_batch: bool | None) -> None:
    """Refuse, by name and before anything is written, each keyword that NNx does not pass to
    ``torch.onnx.export`` as torch means it (module docstring; docs/export.md)."""
    torch_names = (*BOTH_EXPORTERS, *TORCHSCRIPT_ONLY, *DYNAMO_ONLY)
    for name, value in options.items():
        where = f"to_onnx({name}=...)"
        if name in REFUSED:
            raise ParamsError(where, f"torch.onnx.export's {name!r} is not passed through: {REFUSED[name]}")
        if name not in torch_names:
            near = difflib.get_close_matches(name, sorted({*NNX_KEYWORDS, *torch_names, *REFUSED}), n=1, cutoff=0.5)
            hint = f"did you mean {near[0]!r}?" if near else "see docs/export.md for the keywords to_onnx takes"
            raise ParamsError(where, f"unknown keyword (neither NNx's nor torch.onnx.export's); {hint}")
        own, other = ("dynamo=True", "dynamo=False") if dynamo else ("dynamo=False", "dynamo=True")
        if name in (DYNAMO_ONLY if not dynamo else TORCHSCRIPT_ONLY):
            raise ParamsError(where, f"an option of torch's {other} exporter, which torch ignores with {own}: "
                                     f"pass {other}, or drop {name}")
        if name in BOOLEANS and not isinstance(value, bool):
            raise ParamsError(where, f"must be True or False, got {value!r}")
    if dynamo and options.get("export_params") is False:
        raise ParamsError("to_onnx(export_params=False)", "with dynamo=True torch writes a graph without its weights "
                                                          "that onnx.checker refuses: pass dynamo=False for a graph "
                                                          "whose weights are inputs")
    for name in ("dynamic_axes", "dynamic_shapes"):
        if options.get(name) is not None and dynamic_batch is False:
            raise ParamsError(f"to_onnx({name}=...)", "contradicts dynamic_batch=False (no dynamic axis): drop one of them")
    from torch.onnx import OperatorExportTypes, TrainingMode

    if options.get("training", TrainingMode.EVAL) != TrainingMode.EVAL:
        raise ParamsError("to_onnx(training=...)", "NNx exports the net as predict runs it (eval mode, TrainingMode.EVAL); "
                                                   "another mode would export dropout/batch-norm as in training: drop it")
    if options.get("operator_export_type", OperatorExportTypes.ONNX) != OperatorExportTypes.ONNX:
        raise ParamsError("to_onnx(operator_export_type=...)", "only OperatorExportTypes.ONNX gives a file every ONNX "
                                                               "runtime loads (ATen fallbacks do not): drop it")


def to_onnx(
    model: Any,
    /,
    path: str | os.PathLike[str] | None = None,
    example_input: Any = None,
    *,
    opset: int | None = None,
    input_names: Sequence[str] = ("input",),
    output_names: Sequence[str] = ("output",),
    dynamic_batch: bool | None = None,
    check: bool = True,
    dynamo: bool = False,
    opset_version: int | None = None,
    **options: Any,
) -> Path:
    """Export ``model.net`` (in eval mode; each submodule's mode is restored afterwards) to an
    ONNX file traced on ``example_input`` (a tensor or a tuple of tensors). The first axis of
    every input and output is dynamic unless ``dynamic_batch=False``. ``dynamo=True`` selects
    torch's ``torch.export``-based exporter (needs ``onnxscript``); the default is the
    TorchScript-based one. ``opset_version`` is torch's name of ``opset``. ``options`` are
    ``torch.onnx.export``'s keywords NNx passes through (``export_params``,
    ``do_constant_folding``, ``dynamic_axes``...; docs/export.md has the table); the others, and
    unknown ones, are a ``ParamsError`` naming them, raised before anything is written. Returns the path."""
    _check_options(options, dynamo, dynamic_batch)
    if opset_version is not None and opset is not None:
        raise ParamsError("to_onnx(opset_version=...)", "give opset or opset_version (torch's name of it), not both")
    for name, value in (("path", path), ("example_input", example_input)):
        if value is None:
            raise ParamsError(f"to_onnx({name}=...)", f"missing: to_onnx(path, example_input) needs {name}")
    if Path(path).is_dir():
        raise ParamsError("to_onnx(path=...)", f"{path} is a folder: name a file, e.g. {Path(path) / 'model.onnx'}")
    opset = opset if opset is not None else opset_version if opset_version is not None else DEFAULT_OPSET
    require("onnx", "export", "to_onnx")
    import onnx

    if dynamo:
        require("onnxscript", "export", "to_onnx(dynamo=True) (the onnx-dynamo exporter)")

    net = model.net
    device = getattr(model, "device", None) or next(net.parameters()).device
    args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    args = tuple(to_device(a, device) for a in args)
    inputs = list(input_names) if len(input_names) == len(args) else [f"input_{i}" for i in range(len(args))]
    outputs = list(output_names)
    unknown = sorted(set(options.get("dynamic_axes") or {}) - {*inputs, *outputs})
    if unknown:
        raise ParamsError("to_onnx(dynamic_axes=...)", f"names {unknown}, not among the graph's input and output "
                                                       f"names {[*inputs, *outputs]}: use those (input_names=, output_names=)")
    batch = dynamic_batch is not False and options.get("dynamic_axes") is None and options.get("dynamic_shapes") is None
    axes = {name: {0: "batch"} for name in (*inputs, *outputs)} if batch else None
    target = Path(path)
    if target.parent != Path(""):
        target.parent.mkdir(parents=True, exist_ok=True)
    names = {"opset_version": opset, "input_names": inputs, "output_names": outputs, **options}
    with restored_modes(net), warnings.catch_warnings():
        net.eval()
        _forward_once(net, args)
        if dynamo:
            _export_dynamo(net, args, target, names, batch)
        else:
            # the TorchScript exporter is the default on purpose (no onnxscript needed): silence its notices
            warnings.filterwarnings("ignore", ".*legacy TorchScript-based ONNX export.*", DeprecationWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.onnx")
            names.setdefault("dynamic_axes", axes)
            torch.onnx.export(net, args, str(target), dynamo=False, **names)
    if check:
        onnx.checker.check_model(str(target))
    return target


def _forward_once(net: torch.nn.Module, args: tuple[Any, ...]) -> None:
    """One forward of ``net`` on the example before it is traced: a forward that fails is a
    ``ParamsError`` naming the inputs' shapes and dtypes, not the tracer's error."""
    try:
        with torch.no_grad():
            net(*args)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's forward is said the same way
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ParamsError("to_onnx(example_input=...)", f"the net's forward fails on example_input {described(args)} "
                          f"({type(exc).__name__}: {first}); pass inputs of the shape and dtype the net takes "
                          "(as predict takes them)") from exc


def described(args: tuple[Any, ...]) -> str:
    """Inputs in words: each tensor's shape and dtype (``[1, 5] torch.float64``), else its type."""
    return ", ".join(f"{list(a.shape)} {a.dtype}" if isinstance(a, torch.Tensor) else type(a).__name__ for a in args)


def _export_dynamo(
    net: torch.nn.Module, args: tuple[Any, ...], target: Path, names: dict[str, Any], dynamic_batch: bool
) -> None:
    """The ``torch.export``-based exporter. A one-row example would be specialised to batch 1
    (``torch.export`` treats sizes 0 and 1 as constants), so it is traced on the row twice.
    Its progress lines are silenced unless ``verbose=True``."""
    shapes = names.pop("dynamic_shapes", None)
    if dynamic_batch:
        args = tuple(torch.cat([a, a]) if a.dim() and a.shape[0] == 1 else a for a in args)
        batch = torch.export.Dim("batch")
        shapes = tuple({0: batch} for _ in args)
    verbose = bool(names.pop("verbose", False))
    quiet = [] if verbose else [logging.getLogger(name) for name in ("torch.onnx", "onnxscript")]
    levels = [logger.level for logger in quiet]
    stdout = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    try:  # its progress lines, registry notices and version-converter remarks are not the caller's
        for logger in quiet:
            logger.setLevel(logging.ERROR)
        with stdout, warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            torch.onnx.export(net, args, str(target), dynamo=True, dynamic_shapes=shapes, verbose=verbose, **names)
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


SAFETENSORS_NAMES = {"tensors": "source", "filename": "path", "obj": "source", "f": "path"}


def export_safetensors(
    source: Any,
    path: str | os.PathLike[str],
    *,
    tag: str = "best",
    root: str | os.PathLike[str] | None = None,
    metadata: Mapping[str, str] | None = None,
    **options: Any,
) -> Path:
    """Write a state dict as a ``.safetensors`` file and return its path.

    ``source`` is a run id or ``NNRun`` (its checkpoint ``tag`` is read and SHA-256-verified;
    metadata names run, tag, epoch and blob hash), an ``NNModel`` or a ``torch.nn.Module``
    (its current weights). ``metadata`` adds string entries. Any other keyword is a
    ``ParamsError`` naming NNx's way (``save_file``'s ``tensors``/``filename``, ``torch.save``'s
    ``obj``/``f``), raised before anything is written."""
    for name in options:
        ours = SAFETENSORS_NAMES.get(name) or next(
            iter(difflib.get_close_matches(name, ("source", "path", "tag", "root", "metadata"), n=1, cutoff=0.5)), None)
        raise ParamsError(f"export_safetensors({name}=...)", "not a keyword of export_safetensors(source, path, *, tag, "
                                                             "root, metadata)" + (f"; NNx's is {ours!r}" if ours else ""))
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
