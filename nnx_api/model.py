"""``NNModel``: a network plus its loss/task, trained into durable content-addressed runs."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import attrs
import numpy as np
import torch
from torch import nn

from nnx_core.commit import LAST
from nnx_core.errors import (
    CorruptRunError,
    ParamsError,
    PrecisionUnsupportedError,
    ResumeMismatchError,
    RunNotFoundError,
    TrainingInputError,
)
from nnx_core.records import EvaluationDataPoint
from nnx_adapters.pytorch.extras import ExtraMetrics
from nnx_adapters.pytorch.metrics import EpochAccumulator
from nnx_adapters.pytorch.devices import precision_problem
from nnx_adapters.pytorch.tasks import TaskAdapter
from nnx_api.config.params import NNModelParams, NNParams, NNTrainParams, check_extra_metrics
from nnx_api.distributed import DDP, refuse_process_group
from nnx_api.launch import TrainingEntry, launch
from nnx_api.runs.export import to_onnx
from nnx_api.runs.run import NNRun
from nnx_api.training.steps import forward, restored_modes, score, to_device


class Head(NamedTuple):
    """What the model's output means: task kind, output width and labels."""

    kind: str
    width: int
    labels: tuple[str, ...] | None


class PredictionResult(NamedTuple):
    """``predict_proba`` output: raw logits, probabilities (None for regression), decoded
    predictions and the row index of each sample."""

    logits: torch.Tensor
    probabilities: torch.Tensor | None
    decoded: torch.Tensor
    sample_ids: list[int]


class PredictResult(NamedTuple):
    """``predict`` output: raw logits and decoded classes/values."""

    logits: torch.Tensor
    classes: torch.Tensor


def build_feed_forward(params: NNParams) -> nn.Sequential:
    """The built-in MLP: Linear → activation → dropout for each hidden layer, then Linear."""
    layers: list[nn.Module] = []
    dims = params.dims
    for i in range(len(dims) - 2):
        layers += [nn.Linear(dims[i], dims[i + 1]), params.activation()]
        if params.dropout_prob > 0:
            layers.append(nn.Dropout(params.dropout_prob))
    layers.append(nn.Linear(dims[-2], dims[-1]))
    return nn.Sequential(*layers)


def module_signature(module: nn.Module) -> dict[str, Any]:
    """Identity of a user module for the run id: class and parameter names/shapes digest."""
    shapes = [[name, list(t.shape)] for name, t in module.state_dict().items()]
    digest = hashlib.sha256(repr(shapes).encode()).hexdigest()[:16]
    cls = type(module)
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "params": digest}


def _as_tensor(x: Any) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    raise TrainingInputError(f"inputs must be a tensor, an ndarray or a loader of batches, got {type(x).__name__}")


class NNModel:
    """A trainable model: the built-in feed-forward net from ``NNParams`` + ``NNModelParams``, or
    any ``torch.nn.Module`` passed as ``module=``. Weights live on ``model.net``.

    >>> model = NNModel(NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), NNModelParams())
    """

    def __init__(
        self, net_params: NNParams | None = None, params: NNModelParams | None = None, *, module: nn.Module | None = None
    ) -> None:
        params = params or NNModelParams()
        if not isinstance(params, NNModelParams):
            raise ParamsError("NNModel.params", f"must be NNModelParams, got {type(params).__name__}")
        if module is None:
            if not isinstance(net_params, NNParams):
                raise ParamsError("NNModel.net_params", "give NNParams for the built-in net, or module=<nn.Module>")
            net: nn.Module = build_feed_forward(net_params)
        else:
            if not isinstance(module, nn.Module):
                raise ParamsError("NNModel.module", f"must be a torch.nn.Module, got {type(module).__name__}")
            if net_params is not None:
                raise ParamsError("NNModel", "give either net_params (built-in net) or module=, not both")
            net = module
        self.net_params = net_params
        self.params = params
        self.device = params.device()
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ParamsError("NNModelParams.device", "CUDA is not available on this machine; use Devices.CPU")
        self.net = net.to(self.device)
        task = params.resolved_task
        self.task_adapter = TaskAdapter(task.kind, params.loss.value, task.ignore_index, task.threshold)
        self.precision = self._resolve_precision()
        self._topology_transforms: tuple[Any, ...] = ()

    # ------------------------------------------------------------------ description
    @property
    def head(self) -> Head:
        """Task kind, output width and labels of the model's output."""
        task = self.params.resolved_task
        width = self.net_params.output_dim if self.net_params else self._module_width()
        kind = task.kind
        if kind == "multilabel" and width == 1:
            kind = "bernoulli"
        return Head(kind=kind, width=width, labels=task.labels)

    def _module_width(self) -> int:
        if self.params.task and self.params.task.n:
            return self.params.task.n
        last = [m for m in self.net.modules() if isinstance(m, nn.Linear)]
        if not last:
            raise ParamsError("NNModelParams.task", "cannot infer the output width of this module; set TaskSpec(n=...)")
        return last[-1].out_features

    def state(self) -> dict[str, Any]:
        """The model part of the run configuration (model params, and net params or module signature)."""
        out: dict[str, Any] = {"model": self.params.state()}
        if self.net_params is not None:
            out["net"] = self.net_params.state()
        else:
            out["module"] = module_signature(self.net)
        return out

    def _resolve_precision(self) -> str:
        policy = self.params.precision
        if policy is None or policy.mode == "fp32":
            return "fp32"
        problem = precision_problem(policy.mode, self.device)  # fp16 off CUDA; bf16 below compute capability 8.0
        if problem is not None:
            if policy.fallback == "fp32":
                return "fp32"
            raise PrecisionUnsupportedError(problem)
        return policy.mode

    def autocast_context(self) -> Callable[[], Any]:
        """A factory of the forward's autocast context for the resolved precision."""
        if self.precision == "fp32":
            return contextlib.nullcontext
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        device_type = self.device.type
        return lambda: torch.autocast(device_type=device_type, dtype=dtype)

    # ------------------------------------------------------------------ inference
    def _batches(self, data: Any) -> Iterator[Any]:
        if isinstance(data, (torch.Tensor, np.ndarray)):
            yield _as_tensor(data)
            return
        if isinstance(data, tuple) and all(isinstance(d, (torch.Tensor, np.ndarray)) for d in data):
            yield tuple(_as_tensor(d) for d in data)
            return
        for batch in data:
            yield batch[0] if isinstance(batch, (tuple, list)) and len(batch) == 2 else batch

    def _forward_all(self, data: Any) -> torch.Tensor:
        outputs = []
        with restored_modes(self.net), torch.inference_mode(), self.autocast_context()():
            self.net.eval()
            for inputs in self._batches(data):
                outputs.append(forward(self.net, to_device(inputs, self.device)))
        if not outputs:
            raise TrainingInputError("no inputs to predict: the loader yielded no batches")
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)

    def predict(self, data: Any) -> PredictResult:
        """Raw outputs and decoded predictions (argmax classes, thresholded labels, or values)."""
        logits = self._forward_all(data)
        return PredictResult(logits, self.task_adapter.decode(logits))

    def predict_proba(self, data: Any) -> PredictionResult:
        """Logits, probabilities (softmax / sigmoid; None for regression), decoded predictions and
        row ids, computed in eval mode (each submodule's mode is restored afterwards)."""
        logits = self._forward_all(data)
        task = self.task_adapter
        return PredictionResult(logits, task.probabilities(logits), task.decode(logits), list(range(logits.shape[0])))

    def evaluate(
        self, loader: Any, extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None = None,
        metrics: Sequence[Any] = (),
    ) -> EvaluationDataPoint:
        """Score a loader of ``(inputs, targets)``: loss (Σ numerators / Σ valid targets), error,
        accuracy, macro F1/precision/recall and declared ``metrics``, each over the whole pass.

        ``extra_metrics`` (``{name: fn(y_true, y_pred) -> float}``) are called once, on the
        NumPy arrays of every valid target and decoded prediction; their values land in ``extra``.
        """
        fns = check_extra_metrics("evaluate.extra_metrics", extra_metrics)
        acc = EpochAccumulator(self.task_adapter, self.head.width, tuple(metrics), full_scores=True)
        extras = ExtraMetrics(self.task_adapter, fns) if fns else None
        if score(self, loader, acc, extras) == 0:
            raise TrainingInputError("the evaluation loader yielded no batches")
        edp = EvaluationDataPoint(**acc.result())
        return edp if extras is None else attrs.evolve(edp, extra=extras.values(extras.whole()))

    # ------------------------------------------------------------------ checkpoints
    @classmethod
    def from_checkpoint(
        cls, run_id: str, tag: str = LAST, *, root: str | os.PathLike[str] | None = None, module: nn.Module | None = None,
        storage: Any = None,
    ) -> NNModel:
        """Rebuild a model from a committed checkpoint (weights verified against their SHA-256);
        ``storage``: the store the run lives in (default: the file system under ``root``)."""
        run = NNRun.load(run_id, root, storage=storage)
        checkpoint = run.checkpoint(tag)
        if checkpoint is None:
            raise RunNotFoundError(f"run {run.id} has no committed {tag!r} checkpoint (tags: {run.tags() or 'none'})")
        params = NNModelParams.from_state(run.config["model"])
        if "net" in run.config:
            model = cls(NNParams.from_state(run.config["net"]), params)
        else:
            if module is None:
                raise ParamsError("module", f"run {run.id} trained a custom module; pass module=<a fresh instance>")
            if module_signature(module) != run.config["module"]:
                raise ResumeMismatchError("the given module's parameter names/shapes differ from the checkpoint's")
            model = cls(params=params, module=module)
        model.net.load_state_dict(checkpoint.weights())
        return model

    def to_onnx(self, path: str | os.PathLike[str], example_input: Any, **options: Any) -> Any:
        """Export ``net`` to ONNX, traced on ``example_input`` with a dynamic batch axis
        (``nnx_api.runs.export.to_onnx``; needs the ``export`` extra). Returns the file's path."""
        return to_onnx(self, path, example_input, **options)

    # ------------------------------------------------------------------ training
    def run_config(self, params: NNTrainParams, salt: str | None) -> dict[str, Any]:
        """The configuration whose content address is the run id."""
        config = {**self.state(), "train": params.state()}
        if salt is not None:
            if not isinstance(salt, str) or not salt.strip():
                raise ParamsError("salt", "must be a non-blank string")
            config["salt"] = salt
        return config

    def train(
        self,
        params: NNTrainParams,
        callbacks: Sequence[Any] | None = None,
        train_step_fn: Callable[..., Any] | None = None,
        eval_step_fn: Callable[..., Any] | None = None,
        salt: str | None = None,
        root: str | os.PathLike[str] | None = None,
        components: Sequence[Any] | None = None,
        objective: Any = None,
        history: Any = None,
        distributed: Any = None,
        storage: Any = None,
    ) -> NNRun:
        """Train into ``<root>/<run id>/`` and return the committed :class:`NNRun`.

        Every input is validated before anything is written. Each epoch commits durably
        (history → LAST → phase/BEST → deferred writes). A run folder that never committed an
        epoch is removed on failure, so the same configuration can simply be retried.
        ``distributed=nnx.distributed.DDP()`` trains data-parallel on the torchrun group (every
        rank calls ``train``; the writer writes); ``storage=`` a ``Storage`` adapter to keep the
        run in (default: the file system under ``root``, ``$NNX_RUNS`` or ``./runs``).
        """
        if distributed is None:
            refuse_process_group("NNModel.train")  # one process: not inside a group of several ranks
        if not isinstance(params, NNTrainParams):
            raise ParamsError("params", f"must be NNTrainParams, got {type(params).__name__}")
        if distributed is not None and not isinstance(distributed, DDP):
            raise ParamsError("distributed", f"must be nnx.distributed.DDP(...), got {type(distributed).__name__}")
        return launch(
            TrainingEntry(
                kind="nnmodel", model=self, params=params, train=params,
                config=self.run_config(params, salt), optims={"default": params.optim},
                schedulers={"default": params.scheduler}, primary="default", train_step_fn=train_step_fn,
                objective=objective, eval_step_fn=eval_step_fn, callbacks=callbacks or (), components=components or (),
                history=history, root=root, storage=storage, distributed=distributed,
            )
        )


__all__ = ["Head", "NNModel", "PredictResult", "PredictionResult", "CorruptRunError"]
