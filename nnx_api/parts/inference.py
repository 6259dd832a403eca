"""Prediction: NNModel's prediction pass, probability-aware results and streaming prediction.

* ``NNModel.predict`` / ``predict_proba`` / ``iter_predict`` are thin: the pass is here
  (``predict``, ``predict_proba``, ``iter_predict`` of a model; ``forward_all`` the logits of all
  of an input, ``model_outputs`` one batch's, each forward in eval and inference mode under the
  model's autocast, every submodule's mode restored; ``checked_rows`` the check of rows given
  directly). ``predict`` returns a ``PredictResult`` (logits, classes).
* ``ProbabilitySpec(kind, class_axis=-1, labels=None)`` declares how logits become
  probabilities — never inferred from a shape: ``"categorical"`` (softmax over ``class_axis``,
  argmax decoding) or ``"bernoulli"`` (element-wise sigmoid, ``logit >= 0`` decoding into 0/1
  indicators). ``labels`` name the classes / outputs in order.
* ``prediction_from_logits(logits, spec, sample_ids=None)`` builds a ``PredictionResult``;
  ``NNModel.predict_proba(X, spec)`` does so from the model's outputs (without a spec the
  model's ``TaskSpec`` decides; without either it refuses: never inferred). A spec that does not fit
  the logits (class axis out of range or the sample axis, wrong label count, fewer than two
  categorical classes) or non-finite logits raise ``PredictionValidationError``.
* ``NNModel.iter_predict(loader, spec=None, rich=False)`` returns a ``PredictionStream``: a
  context manager yielding one ``PredictionBatch`` (logits, classes, sample ids) — or with a
  spec / ``rich=True`` one ``PredictionResult`` — per loader batch. Concatenated, the batches
  equal the eager result; a closed stream raises ``StreamClosedError``.

Results hold NumPy arrays on the host, as NNx 0.4.1 returns them: ``logits`` in the network's
float dtype (float32 for a float32 net; bfloat16 outputs become float32, which NumPy cannot hold
otherwise), ``probabilities`` in at least float32, categorical classes and 0/1 indicators ``int64``, regression values
in the logits' dtype, and ``sample_ids`` ``int64`` row indices (the row's position in the input,
or in the loader's iteration order). Code that needs tensors converts explicitly:
``torch.from_numpy(result.logits)``.

>>> spec = ProbabilitySpec("categorical", labels=("no", "yes"))
>>> prediction_from_logits(torch.tensor([[0.0, 2.0]]), spec).decoded_labels()
array(['yes'], dtype=object)
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from nnx_core.errors import BatchTypeError, NetOutputError, NNxError, ParamsError, PredictionInputError, TrainingInputError
from nnx_adapters.pytorch.batches import net_output, restored_modes, to_device
from nnx_api.config.params import NNParams
from nnx_api.parts.models import output_items, prediction_hint

KINDS = ("categorical", "bernoulli")


class PredictionValidationError(NNxError, ValueError):
    """A ``ProbabilitySpec`` that is invalid or does not fit the logits, or non-finite logits."""


class StreamClosedError(NNxError, RuntimeError):
    """A ``PredictionStream`` was used after it was closed or consumed."""


@dataclasses.dataclass(frozen=True, slots=True)
class ProbabilitySpec:
    """How logits become probabilities: ``kind`` (``"categorical"`` / ``"bernoulli"``), the
    ``class_axis`` (negative counts from the end; never axis 0, the samples) and optional class
    ``labels`` (unique non-empty strings, one per entry along the class axis)."""

    kind: str
    class_axis: int = -1
    labels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        kind, labels = self.kind, self.labels
        if kind not in KINDS:
            raise PredictionValidationError(f"ProbabilitySpec kind must be one of {KINDS}, got {kind!r}")
        if isinstance(self.class_axis, bool) or not isinstance(self.class_axis, int):
            raise PredictionValidationError(f"ProbabilitySpec class_axis must be an integer, got {self.class_axis!r}")
        if labels is None:
            return
        if isinstance(labels, (str, bytes, Mapping, set, frozenset)):
            raise PredictionValidationError(f"ProbabilitySpec labels must be a sequence of strings, got {labels!r}")
        labels = tuple(labels)
        if not all(isinstance(x, str) and x for x in labels) or len(set(labels)) != len(labels):
            raise PredictionValidationError(f"ProbabilitySpec labels must be unique non-empty strings, got {labels!r}")
        if len(labels) < (2 if kind == "categorical" else 1):
            raise PredictionValidationError(f"a {kind} ProbabilitySpec needs more labels, got {len(labels)}")
        object.__setattr__(self, "labels", labels)

    def axis(self, ndim: int) -> int:
        """The non-negative class axis of ``ndim``-d logits."""
        if ndim < 2:
            raise PredictionValidationError(f"logits need a sample axis and a class axis (at least 2-D), got {ndim}-D")
        axis = self.class_axis + ndim if self.class_axis < 0 else self.class_axis
        if not 0 <= axis < ndim:
            raise PredictionValidationError(
                f"class_axis {self.class_axis} is out of range for {ndim}-D logits ({-ndim}..{ndim - 1})"
            )
        if axis == 0:
            raise PredictionValidationError("class_axis is axis 0, the sample axis; declare the class axis")
        return axis

    def state(self) -> dict[str, Any]:
        """Plain mapping (labels in order)."""
        out: dict[str, Any] = {"kind": self.kind, "class_axis": self.class_axis}
        if self.labels is not None:
            out["labels"] = list(self.labels)
        return out

    @classmethod
    def from_state(cls, state: Any) -> ProbabilitySpec:
        """Rebuild from :meth:`state`."""
        return cls(state["kind"], state.get("class_axis", -1), state.get("labels"))


class PredictionResult(NamedTuple):
    """``predict_proba`` output, as NumPy arrays: raw ``logits``, ``probabilities`` (None for
    regression), ``decoded`` predictions (``int64`` class indices or 0/1 indicators, or the
    values), the ``int64`` row index of each sample, and the ``spec`` that produced them (None
    when the model's task decided)."""

    logits: np.ndarray
    probabilities: np.ndarray | None
    decoded: np.ndarray
    sample_ids: np.ndarray
    spec: ProbabilitySpec | None = None

    @property
    def kind(self) -> str:
        """``"categorical"``, ``"bernoulli"`` or ``"continuous"`` (no probabilities)."""
        if self.spec is not None:
            return self.spec.kind
        if self.probabilities is None:
            return "continuous"
        return "categorical" if np.ndim(self.decoded) < np.ndim(self.logits) else "bernoulli"

    @property
    def class_axis(self) -> int:
        """The non-negative class axis of ``logits`` (probabilistic results only)."""
        if self.spec is None:
            raise TypeError("class_axis is defined for probabilistic results; this one is continuous")
        return self.spec.axis(np.ndim(self.logits))

    @property
    def labels(self) -> tuple[str, ...] | None:
        """The spec's class labels."""
        return None if self.spec is None else self.spec.labels

    @property
    def class_indices(self) -> np.ndarray:
        """Decoded class indices; bernoulli indicators are not classes and are refused."""
        if self.kind != "categorical":
            raise TypeError(f"class_indices is only defined for categorical predictions, this one is {self.kind}")
        return self.decoded

    def decoded_labels(self) -> np.ndarray:
        """The decoded classes as their labels (needs ``spec.labels``): an object ndarray of the
        decoded classes' shape, as NNx returns it (``.tolist()`` gives plain strings)."""
        if self.labels is None:
            raise PredictionValidationError("decoded_labels() needs ProbabilitySpec(labels=...)")
        table = np.empty(len(self.labels), dtype=object)
        table[:] = list(self.labels)
        return table[np.asarray(self.class_indices)]


@dataclasses.dataclass(frozen=True)
class PredictionBatch:
    """One streamed batch, as NumPy arrays (as ``predict`` returns them): raw ``logits``, decoded
    ``classes`` and the ``int64`` ``sample_ids`` of its rows; ``len(batch)`` is its row count."""

    logits: np.ndarray
    classes: np.ndarray
    sample_ids: np.ndarray

    def __len__(self) -> int:  # rows, not fields
        return len(self.sample_ids)


def host_array(values: Any) -> np.ndarray:
    """A tensor (any device) or array as a NumPy array on the host, without a copy where it can:
    bfloat16, which NumPy cannot hold, becomes float32; other dtypes are kept."""
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values, torch.Tensor):
        tensor = values.detach()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return tensor.cpu().numpy()
    return np.asarray(values)


def check_fits(logits: Any, spec: ProbabilitySpec) -> int:
    """Check ``spec`` against the logits' shape (a tensor or an array); the class axis."""
    axis = spec.axis(len(logits.shape))
    width = logits.shape[axis]
    if spec.labels is not None and len(spec.labels) != width:
        raise PredictionValidationError(
            f"ProbabilitySpec has {len(spec.labels)} labels but the logits have {width} entries along axis {axis}"
        )
    if spec.kind == "categorical" and width < 2:
        raise PredictionValidationError(f"categorical predictions need at least 2 classes along axis {axis}, got {width}")
    return axis


def row_ids(start: int, count: int) -> np.ndarray:
    """``int64`` ids ``start .. start + count - 1`` (a NumPy array)."""
    return np.arange(start, start + count, dtype=np.int64)


def prediction_from_logits(logits: Any, spec: ProbabilitySpec, *, sample_ids: Any = None) -> PredictionResult:
    """The ``PredictionResult`` of ``logits`` (a tensor or an array) under ``spec``, as NumPy
    arrays: probabilities computed in at least float32, ``int64`` decoded classes / indicators;
    ``sample_ids`` default to the row indices."""
    if not isinstance(spec, ProbabilitySpec):
        raise ParamsError("spec", f"must be a ProbabilitySpec, got {type(spec).__name__}")
    if not isinstance(logits, torch.Tensor):
        array = np.asarray(logits)
        if array.dtype.kind not in "biuf":
            raise PredictionValidationError(f"logits must be numeric (bool, integer or float), got dtype {array.dtype}")
        logits = torch.as_tensor(array)
    logits = logits.detach()
    axis = check_fits(logits, spec)
    if not bool(torch.isfinite(logits).all()):
        raise PredictionValidationError(
            "logits hold non-finite values (NaN or ±inf), so probabilities would be undefined; "
            "mask with a large finite negative value instead"
        )
    # float16 is computed in float32 and given back as float16; integers in float64 (NNx's dtypes)
    work = logits if logits.dtype in (torch.float32, torch.float64) else (
        logits.double() if not logits.dtype.is_floating_point else logits.float())
    if spec.kind == "categorical":
        probabilities, decoded = torch.softmax(work, dim=axis), logits.argmax(dim=axis)
    else:
        probabilities, decoded = torch.sigmoid(work), (logits >= 0).long()
    if logits.dtype == torch.float16:
        probabilities = probabilities.half()
    ids = row_ids(0, logits.shape[0]) if sample_ids is None else host_array(sample_ids)
    if ids.ndim != 1 or len(ids) != logits.shape[0] or ids.dtype.kind not in "iu":
        raise PredictionValidationError(
            f"sample_ids must be one integer id per sample ({logits.shape[0]} samples), got shape {tuple(ids.shape)}"
        )
    return PredictionResult(
        host_array(logits), host_array(probabilities), host_array(decoded), ids.astype(np.int64, copy=False), spec
    )


def concatenate_predictions(parts: Sequence[Any]) -> Any:
    """One ``PredictionBatch`` / ``PredictionResult`` of streamed parts, as the eager call returns it."""
    if not parts:
        raise ParamsError("concatenate_predictions", "needs at least one streamed batch")
    first = parts[0]
    if isinstance(first, PredictionBatch):
        return PredictionBatch(*(concatenate([getattr(p, f) for p in parts]) for f in ("logits", "classes", "sample_ids")))
    for field in first._fields[:4]:  # a field some parts hold and others lack cannot be one result
        missing = {getattr(p, field) is None for p in parts}
        if len(missing) > 1:
            raise ParamsError("concatenate_predictions", f"got results with and without {field}")
    merged = [None if getattr(first, f) is None else concatenate([getattr(p, f) for p in parts]) for f in first._fields[:4]]
    return PredictionResult(*merged, first.spec)


class PredictionStream:
    """Per-batch predictions of a loader, as a context manager and an iterator. It holds only the
    batch in flight. ``close()`` (or leaving the ``with`` block, or an error raised while a batch
    is computed) releases the loader's iterator and the model; a closed or consumed stream is
    exhausted (``next`` raises ``StopIteration``, as a closed generator does), and iterating it
    again, or iterating a partly consumed one, raises ``StreamClosedError``."""

    def __init__(self, batches: Iterator[Any]) -> None:
        self._batches: Iterator[Any] | None = batches
        self._state = "open"  # open → started → consumed / closed

    @property
    def closed(self) -> bool:
        """Whether the stream was closed or consumed."""
        return self._batches is None

    def __enter__(self) -> PredictionStream:
        self._check()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __iter__(self) -> PredictionStream:
        self._check()
        if self._state == "started":
            raise StreamClosedError(
                "this PredictionStream is partly consumed: iterating it again would skip the batches already "
                "taken; call iter_predict again"
            )
        return self

    def __next__(self) -> Any:
        if self._batches is None:
            raise StopIteration
        try:
            batch = next(self._batches)
        except StopIteration:
            self._release("consumed")
            raise
        except BaseException:
            self._release("closed")
            raise
        self._state = "started"
        return batch

    def close(self) -> None:
        """Stop and release the loader's iterator (idempotent); the stream is closed even when
        the iterator's own cleanup raises."""
        if self._batches is not None:
            self._release("closed")

    def _release(self, state: str) -> None:
        batches, self._batches, self._state = self._batches, None, state
        close: Callable[[], None] | None = getattr(batches, "close", None)
        if close is not None:
            close()

    def _check(self) -> None:
        if self._batches is None:
            raise StreamClosedError(f"this PredictionStream is {self._state}; call iter_predict again")


def concatenate(parts: Sequence[Any]) -> Any:
    """One tensor of per-batch tensors, or one array of per-batch arrays (no copy for a single
    batch)."""
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(list(parts))
    return torch.cat(list(parts))


# ---------------------------------------------------------------------------- NNModel's prediction pass
class PredictResult(NamedTuple):
    """``predict`` output, as NumPy arrays (as NNx 0.4.1 returns them): raw ``logits`` (float32
    for a float32 net) and decoded ``classes`` (``int64`` class indices or 0/1 indicators, or the
    values of a regression). ``torch.from_numpy(result.logits)`` gives a tensor."""

    logits: np.ndarray
    classes: np.ndarray


def _check_tensors(args: tuple[Any, ...]) -> None:
    """Refuse (a ``TypeError``) inputs of a built-in net that are no tensor or array."""
    for value in args:
        if not isinstance(value, (torch.Tensor, np.ndarray)):
            raise BatchTypeError(
                f"inputs must be tensors or arrays (or a loader of batches of them), got an element of type "
                f"{type(value).__name__}"
            )


def _as_tensor(x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    raise TrainingInputError(f"inputs must be a tensor, an ndarray or a loader of batches, got {type(x).__name__}")


def _python_rows(data: Any) -> bool:
    """Whether ``data`` is a list of numbers or of lists of numbers (rows typed by hand), not a
    re-iterable of batches."""
    if not isinstance(data, list) or not data:
        return False
    first = data[0][0] if isinstance(data[0], list) and data[0] else data[0]
    return isinstance(first, (int, float)) and not isinstance(first, bool)


_OWN_PACKAGES = ("nnx_api", "nnx_core", "nnx_adapters", "nnx")


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first caller outside this package (and NNx's own module names):
    a warning then points at the user's line, whichever of our functions raised it."""
    frame, level = sys._getframe(1), 1
    while frame is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] in _OWN_PACKAGES:
        frame, level = frame.f_back, level + 1
    return level


def _warn_if_shuffled(data: Any, caller: str) -> None:
    if isinstance(getattr(data, "sampler", None), torch.utils.data.RandomSampler):
        warnings.warn(
            f"{caller}: a shuffling DataLoader gives its rows in a new order on every pass, so sample_ids are "
            "iteration positions, not dataset rows; pass shuffle=False to identify rows",
            UserWarning,
            stacklevel=_user_stacklevel(),
        )


def model_inputs(model: Any, data: Any) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """``(args, kwargs)`` of each forward of ``model`` (an ``NNModel``) over ``data``: one call for a
    tensor, an array, a tuple of them or (with ``KeywordInputs``) a mapping; one per batch of a loader."""
    adapter = model.batch_adapter
    if isinstance(data, (torch.Tensor, np.ndarray)):
        yield (checked_rows(model, _as_tensor(data)),), {}
        return
    if isinstance(data, tuple) and data and all(isinstance(d, (torch.Tensor, np.ndarray)) for d in data):
        yield tuple(_as_tensor(d) for d in data), {}
        return
    if _python_rows(data):
        raise PredictionInputError(
            f"inputs are a Python {type(data).__name__} of numbers; pass a tensor, e.g. torch.tensor(rows, "
            "dtype=torch.float32) (one row: a list of features; many: a list of such lists)"
        )
    if isinstance(data, Mapping) and adapter is not None:
        args, kwargs, _ = adapter.split(data)
        yield args, kwargs
        return
    for batch in data:
        if adapter is not None:
            args, kwargs, _ = adapter.split(batch)
            yield args, kwargs
            continue
        inputs = batch[0] if isinstance(batch, (tuple, list)) and len(batch) == 2 else batch
        args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        if model.net_params is not None:  # a built-in net takes tensors only
            _check_tensors(args)
        yield args, {}


def checked_rows(model: Any, x: torch.Tensor) -> torch.Tensor:
    """Rows given to ``predict`` directly, checked before the forward (as training checks its
    first batch): float inputs of the parameters' dtype and, for a built-in net, ``input_dim``
    features per row (one row may come 1-D; the net flattens each row)."""
    net = model.net_params
    builtin = net is not None and type(net) is NNParams  # a custom module may take integer ids
    weights = next((p for p in model.net.parameters() if p.dtype.is_floating_point), None)
    if (weights is not None and x.dtype != weights.dtype and model.precision == "fp32"
            and (builtin or x.dtype.is_floating_point)):
        raise PredictionInputError(
            f"inputs are {x.dtype} but the model's parameters are {weights.dtype}; convert them with "
            "x.float() (an ndarray: torch.from_numpy(x).float())"
        )
    if not builtin:
        return x
    if x.dim() == 1 and x.shape[0] == net.input_dim:
        return x.unsqueeze(0)  # one row
    if x.dim() < 2 or x.shape[1:].numel() != net.input_dim:
        raise PredictionInputError(
            f"inputs have shape {list(x.shape)}, but NNParams.input_dim is {net.input_dim}: pass rows of "
            f"{net.input_dim} features, shape (rows, {net.input_dim}) (one row: ({net.input_dim},))"
        )
    return x


def first_batch_checked(model: Any, loader: Any) -> Iterator[Any]:
    """``loader``'s batches, the first one's inputs checked as ``predict`` checks rows."""
    for i, batch in enumerate(loader):
        if i == 0 and model.batch_adapter is None and isinstance(batch, (tuple, list)) and len(batch) == 2 \
                and isinstance(batch[0], torch.Tensor):
            checked_rows(model, batch[0])
        yield batch


def model_outputs(model: Any, data: Any) -> Iterator[torch.Tensor]:
    """The logits of each forward of ``model`` over ``data``, each computed in eval mode under
    inference mode and the model's autocast; every submodule's mode is restored before it is yielded."""
    for args, kwargs in model_inputs(model, data):
        with restored_modes(model.net), torch.inference_mode(), model.autocast_context()():
            model.net.eval()
            out = net_output(model, model.net, *to_device((args, kwargs), model.device))
        if not isinstance(out, torch.Tensor):
            raise NetOutputError(f"the net returned {output_items(out)}, not a tensor of logits; {prediction_hint(out)}")
        yield out


def forward_all(model: Any, data: Any, caller: str = "predict", spec: ProbabilitySpec | None = None) -> torch.Tensor:
    """The logits of all of ``data`` as one tensor on the model's device (the inference pass
    ``predict`` / ``predict_proba`` convert to NumPy); a ``spec`` is checked against the first
    batch's logits, before the rest of a loader runs."""
    outputs: list[torch.Tensor] = []
    for out in model_outputs(model, data):
        if spec is not None and not outputs:
            check_fits(out, spec)
        outputs.append(out)
    if not outputs:
        raise PredictionInputError(f"nothing to predict: the input is empty ({caller}() loader produced zero batches)")
    return concatenate(outputs)


def task_result(model: Any, logits: torch.Tensor, ids: np.ndarray) -> PredictionResult:
    """The ``PredictionResult`` the model's ``TaskSpec`` gives ``logits`` (NumPy arrays), with the
    ``ProbabilitySpec`` the task implies (classes on axis 1, the task's labels; None for a regression)."""
    task = model.task_adapter
    probabilities = task.probabilities(logits)
    declared = model.params.task
    spec = None if probabilities is None else ProbabilitySpec(
        "categorical" if task.kind == "categorical" else "bernoulli", 1, getattr(declared, "labels", None))
    return PredictionResult(
        host_array(logits), None if probabilities is None else host_array(probabilities),
        host_array(task.decode(logits)), ids, spec,
    )


def _refuse_unspecified(model: Any, caller: str) -> None:
    """Without a ``spec`` probabilities come from the model's ``TaskSpec``, never from the
    logits' shape: without either, refuse (a ``TypeError``, as NNx raises)."""
    if model.params.task is None:
        raise ParamsError(
            f"NNModel.{caller}.spec",
            f"is required without a TaskSpec: {caller}() needs a ProbabilitySpec, as probabilities are never "
            "inferred from the outputs; pass "
            "spec=ProbabilitySpec(kind='categorical' or 'bernoulli') or set NNModelParams(task=TaskSpec...)",
        )


def predict(model: Any, X: Any) -> PredictResult:
    """``NNModel.predict``: raw outputs and decoded predictions of ``X`` as NumPy arrays."""
    logits = forward_all(model, X, "predict")
    return PredictResult(host_array(logits), host_array(model.task_adapter.decode(logits)))


def predict_proba(model: Any, X: Any, spec: ProbabilitySpec | None = None) -> PredictionResult:
    """``NNModel.predict_proba``: logits, probabilities, decoded predictions and row ids of ``X``
    under ``spec``, else under the model's ``TaskSpec`` (without either: ``ParamsError``)."""
    if spec is None:
        _refuse_unspecified(model, "predict_proba")
    if spec is not None and not isinstance(spec, ProbabilitySpec):
        raise ParamsError("NNModel.predict_proba.spec", f"must be a ProbabilitySpec, got {type(spec).__name__}")
    _warn_if_shuffled(X, "predict_proba")
    logits = forward_all(model, X, "predict_proba", spec)
    if spec is not None:
        return prediction_from_logits(logits, spec)
    return task_result(model, logits, row_ids(0, logits.shape[0]))


def iter_predict(model: Any, X: Any, spec: ProbabilitySpec | None = None, *, rich: bool = False) -> PredictionStream:
    """``NNModel.iter_predict``: the predictions of a loader as a ``PredictionStream``, one batch at
    a time (``PredictionBatch``, or with a ``spec`` / ``rich=True`` ``PredictionResult``)."""
    if isinstance(X, (torch.Tensor, np.ndarray)) or (isinstance(X, tuple) and X and all(
            isinstance(x, (torch.Tensor, np.ndarray)) for x in X)):
        raise BatchTypeError(
            "iter_predict streams a loader of batches, not arrays in memory: use predict / predict_proba for "
            "them, or wrap it in a DataLoader"
        )
    if type(X).__module__.startswith("torch_geometric.data"):
        raise BatchTypeError("iter_predict got one graph, not a stream of batches: wrap it in a loader")
    if spec is not None and not isinstance(spec, ProbabilitySpec):
        raise ParamsError("iter_predict.spec", f"must be a ProbabilitySpec, got {type(spec).__name__}")
    if spec is None and rich:
        _refuse_unspecified(model, "iter_predict")
    _warn_if_shuffled(X, "iter_predict")
    task = model.task_adapter

    def batches() -> Iterator[Any]:
        start = 0
        for logits in model_outputs(model, X):
            ids = row_ids(start, logits.shape[0])
            start += logits.shape[0]
            if spec is not None:
                check_fits(logits, spec)
                yield prediction_from_logits(logits, spec, sample_ids=ids)
            elif rich:
                yield task_result(model, logits, ids)
            else:
                yield PredictionBatch(host_array(logits), host_array(task.decode(logits)), ids)

    return PredictionStream(batches())


def checked_example(model: Any, example_input: Any, where: str) -> tuple[Any, ...]:
    """The positional inputs of an example (``to_onnx``'s ``example_input``: a tensor, an
    ndarray, or a tuple of them), checked as ``predict`` checks its inputs (``checked_rows``: the
    dtype of the parameters, a built-in net's ``input_dim``; rows typed as a Python list are
    refused) before anything is traced; a problem is a ``ParamsError`` at ``where``."""
    if _python_rows(example_input):
        raise ParamsError(where, f"is a Python {type(example_input).__name__} of numbers; pass a tensor, e.g. "
                                 "torch.tensor(rows, dtype=torch.float32)")
    args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    args = tuple(torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args)
    if len(args) == 1 and isinstance(args[0], torch.Tensor) and hasattr(model, "net_params") \
            and getattr(model, "batch_adapter", None) is None:
        try:
            args = (checked_rows(model, args[0]),)
        except PredictionInputError as exc:
            raise ParamsError(where, str(exc).replace("inputs are", "it is", 1).replace("inputs have", "it has", 1)) from exc
    return args
