"""``NNModel``: a network plus its loss/task, trained into durable content-addressed runs.

Here: building a model (a built-in net, a registered ``ModelSpec`` or a module of your own), its
description (head, precision, state), fine-tuning helpers, ``evaluate``, rebuilding one from a
checkpoint (``from_checkpoint``) and the training entry (``train``). ``predict``, ``predict_proba``
and ``iter_predict`` are thin: the prediction pass lives in ``nnx_api.parts.inference``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import attrs
import torch
from torch import nn

from nnx_core.commit import LAST
from nnx_core.errors import CorruptRunError, ParamsError, ResumeMismatchError, TrainingInputError
from nnx_core.precision import ResolvedPrecision
from nnx_core.records import EvaluationDataPoint
from nnx_adapters.pytorch.devices import resolve_precision
from nnx_adapters.pytorch.extras import ExtraMetrics
from nnx_adapters.pytorch.metrics import EpochAccumulator, resolve
from nnx_adapters.pytorch.tasks import TaskAdapter
from nnx_api import finetune
from nnx_api.config.enums import Nets
from nnx_api.config.identity import class_path, run_config
from nnx_api.config.params import ModelSpec, NNModelParams, NNParams, RuntimeModule
from nnx_api.config.train_params import NNTrainParams, check_extra_metrics, refuse_train_keywords
from nnx_api.distributed import DDP, refuse_process_group
from nnx_api.launch import TrainingEntry, launch
from nnx_api.parts import inference
from nnx_api.parts.inference import PredictionResult, PredictionStream, PredictResult, ProbabilitySpec
from nnx_api.parts.models import BatchAdapter, MissingModelFactoryError, build_module
from nnx_api.runs.export import to_onnx
from nnx_api.runs.hints import pretrained_source, swapped, tag_argument
from nnx_api.runs.run import NNCheckpoint, NNRun
from nnx_api.scope import EXTRAS, HUB, refuse, refusing_method
from nnx_api.training.roles import NNMODEL
from nnx_api.training.steps import score


class Head(NamedTuple):
    """What the model's output means: task kind, output width and labels."""

    kind: str
    width: int
    labels: tuple[str, ...] | None


def module_signature(module: nn.Module) -> dict[str, Any]:
    """Identity of a user module for the run id: its class's importable name (``class_path``: the
    same for ``python train.py`` and ``from train import Net``) and a digest of its parameter
    names and shapes (a lazy module's uninitialised parameter counts by its name alone)."""
    shapes = [[name, None if isinstance(t, nn.parameter.UninitializedTensorMixin) else list(t.shape)]
              for name, t in module.state_dict().items()]
    digest = hashlib.sha256(repr(shapes).encode()).hexdigest()[:16]
    return {"class": class_path(type(module)), "params": digest}


def _module_mismatch(module: nn.Module, signature: Mapping[str, Any] | None, state: Mapping[str, Any]) -> str | None:
    """What keeps ``module`` from loading a checkpoint's weights (``state``): the parameter names
    and shapes that differ, or None when they match (its class may be named otherwise)."""
    if signature is not None and module_signature(module)["params"] == signature.get("params"):
        return None
    mine = {name: tuple(t.shape) for name, t in module.state_dict().items()}
    saved = {name: tuple(t.shape) for name, t in state.items()}
    problems = [f"missing {name} {list(shape)}" for name, shape in saved.items() if name not in mine]
    problems += [f"unexpected {name} {list(shape)}" for name, shape in mine.items() if name not in saved]
    problems += [
        f"{name}: {list(mine[name])} here, {list(shape)} in the checkpoint"
        for name, shape in saved.items() if name in mine and mine[name] != shape
    ]
    return "; ".join(problems[:6]) + (f"; … ({len(problems)} in all)" if len(problems) > 6 else "") if problems else None


def _runtime_params(params: NNModelParams, module: nn.Module) -> NNModelParams:
    """``params`` with ``net`` the ``RuntimeModule`` of ``module``: an unset net is filled in, a
    given descriptor must describe ``module``; a built-in net or a ``ModelSpec`` is refused."""
    descriptor = RuntimeModule.of(module)
    if params.net is None:
        return dataclasses.replace(params, net=descriptor)
    if not isinstance(params.net, RuntimeModule):
        raise ParamsError(
            "NNModel", f"NNModelParams.net must be None with module= (it becomes the module's RuntimeModule), "
            f"got {params.net!r}"
        )
    if params.net != descriptor:
        raise ParamsError(
            "NNModel.module", f"{descriptor!r} does not match the descriptor NNModelParams.net={params.net!r}"
        )
    return params


def _missing_device(device: torch.device) -> str | None:
    """The accelerator ``device`` names when this machine (or this torch build) has none."""
    if device.type == "cuda" and not torch.cuda.is_available():
        return "CUDA"
    mps = getattr(torch.backends, "mps", None)
    if device.type == "mps" and not (mps is not None and mps.is_available()):
        return "MPS"
    return None


_DEFAULT_LOSS = NNModelParams().loss
_RESTORING = contextvars.ContextVar("nnx_restoring_checkpoint", default=False)
"""True while ``from_checkpoint`` builds a model: a trained configuration loads as it was trained."""


class NNModel:
    """A trainable model: a built-in net (``Nets`` member in ``NNModelParams.net``, shaped by
    ``NNParams``), a registered one (``ModelSpec``), or any ``torch.nn.Module`` passed as
    ``module=``. Weights live on ``model.net``; ``loss_fn`` is the loss module.
    ``batch_adapter`` (``PositionalInputs``, ``KeywordInputs`` or a ``BatchAdapter``) says how a
    batch reaches the net in the default training step, validation, ``evaluate`` and prediction.

    >>> model = NNModel(NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), NNModelParams())
    """

    def __init__(
        self, net_params: NNParams | None = None, params: NNModelParams | None = None, *,
        module: nn.Module | None = None, batch_adapter: BatchAdapter | None = None,
    ) -> None:
        params = params or NNModelParams()
        if not isinstance(params, NNModelParams):
            raise ParamsError("NNModel.params", f"must be NNModelParams, got {type(params).__name__}")
        if isinstance(batch_adapter, type) and issubclass(batch_adapter, BatchAdapter):
            raise ParamsError(
                "NNModel.batch_adapter", f"is the class {batch_adapter.__name__}, not an instance; write "
                f"{batch_adapter.__name__}(...), e.g. KeywordInputs(['x'], target='y') or PositionalInputs(2)"
            )
        if batch_adapter is not None and not isinstance(batch_adapter, BatchAdapter):
            raise ParamsError(
                "NNModel.batch_adapter", f"must be PositionalInputs, KeywordInputs or a BatchAdapter, got {batch_adapter!r}"
            )
        spec = params.resolved_task
        task = TaskAdapter(spec.kind, params.loss.value, spec.ignore_index, spec.threshold,
                           explicit=params.task is not None, n=spec.n, spec=params.task)
        if params.task is not None and not _RESTORING.get():  # a checkpoint loads as it was trained
            # the default loss yields to the declared task (the task's own loss trains); another one is checked
            loss = None if params.loss == _DEFAULT_LOSS else params.loss
            task.check_model(loss=loss, output_dim=getattr(net_params, "output_dim", None))
        if module is not None or isinstance(params.net, (ModelSpec, RuntimeModule)):
            if net_params is not None:
                raise ParamsError(
                    "NNModel", "net_params shape a built-in net; pass net_params=None with module= or a ModelSpec "
                    "(give net_params or module=, not both)"
                )
            if module is None and isinstance(params.net, RuntimeModule):
                raise MissingModelFactoryError(
                    f"NNModelParams.net is {params.net!r}, a runtime-only module no factory rebuilds; pass the "
                    "module again as NNModel(params=..., module=<the module>)"
                )
            net = module if module is not None else build_module(params.net)
            if not isinstance(net, nn.Module):
                raise ParamsError("NNModel.module", f"must be a torch.nn.Module, got {type(net).__name__}")
            if module is not None:
                params = _runtime_params(params, module)
        else:
            if params.net is None:  # a feed-forward net, the net NNParams shape by default
                params = dataclasses.replace(params, net=Nets.FEED_FWD)
            if not isinstance(net_params, NNParams):
                raise ParamsError("NNModel.net_params", f"give NNParams for Nets.{params.net.name}, or module=<nn.Module>")
            net = params.net(net_params)
        self.net_params = net_params
        self.params = params
        self.batch_adapter = batch_adapter
        self.device = params.device()
        missing = _missing_device(self.device)
        if missing is not None:
            raise ParamsError("NNModelParams.device", f"{missing} is not available on this machine; use Devices.CPU "
                              "(or device='auto': CUDA, then MPS, then the CPU)")
        self.net = net.to(self.device)
        self._loss_fn = params.loss().to(self.device)
        self._loss_assigned = False
        self._task = self.task_adapter = task
        self._resolved_precision = self._resolve_precision()
        self.precision = self._resolved_precision.effective
        self._precision_key = self._precision_request()
        self._topology_transforms: tuple[Any, ...] = ()

    @property
    def loss_fn(self) -> Any:
        """The loss module (built from ``NNModelParams.loss``). Assign your own — a loss module or
        ``fn(outputs, targets) -> tensor`` — and the built-in step, objectives, validation and
        ``evaluate`` use it: ``reduction="sum"`` sums (windows are not normalised, records hold the
        sum), a mean is normalised by its own denominator (``ModuleLossTask``)."""
        return self._loss_fn

    @loss_fn.setter
    def loss_fn(self, fn: Any) -> None:
        if not callable(fn):
            raise ParamsError("NNModel.loss_fn", f"must be a loss module or fn(outputs, targets), got {type(fn).__name__}")
        if getattr(fn, "reduction", "mean") not in ("mean", "sum", "none"):
            raise ParamsError("NNModel.loss_fn", f"reduction must be 'mean', 'sum' or 'none', got {fn.reduction!r}")
        self._loss_fn = fn
        self._loss_assigned = True
        self.task_adapter = self._task.with_loss(fn)

    @property
    def loss_assigned(self) -> bool:
        """Whether a loss of your own was assigned to ``loss_fn`` (False: the task's built-in loss trains)."""
        return self._loss_assigned

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
        model_params = self.params
        if isinstance(model_params.net, RuntimeModule):  # the module's signature below names it
            model_params = dataclasses.replace(model_params, net=None)  # written as before: run ids hold
        out: dict[str, Any] = {"model": model_params.state()}
        if self.net_params is not None:
            out["net"] = self.net_params.state()
        elif not isinstance(self.params.net, ModelSpec):  # a registered net is named by its spec
            out["module"] = module_signature(self.net)
        return out

    def _resolve_precision(self) -> ResolvedPrecision:
        return resolve_precision(self.params.precision, self.params.mixed_precision, self.device)

    def _precision_request(self) -> tuple[Any, ...]:
        return self.params.precision, self.params.mixed_precision, self.device

    @property
    def resolved_precision(self) -> ResolvedPrecision:
        """What the precision request became on this device (``effective`` is ``self.precision``);
        resolved again once ``params``' precision or the device changed (an unsupported request
        then raises ``PrecisionUnsupportedError``)."""
        if self._precision_request() != getattr(self, "_precision_key", None):
            self._resolved_precision = self._resolve_precision()
            self.precision, self._precision_key = self._resolved_precision.effective, self._precision_request()
        return self._resolved_precision

    def autocast_context(self) -> Callable[[], Any]:
        """A factory of the forward's autocast context for the resolved precision."""
        self.resolved_precision  # noqa: B018 - re-resolved if the request changed
        if self.precision == "fp32":
            return contextlib.nullcontext
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        device_type = self.device.type
        return lambda: torch.autocast(device_type=device_type, dtype=dtype)

    save_pretrained = refusing_method("NNModel.save_pretrained", HUB)
    push_to_hub = refusing_method("NNModel.push_to_hub", HUB)
    from_pretrained = refusing_method("NNModel.from_pretrained", HUB)

    # ------------------------------------------------------------------ fine-tuning
    def freeze(self, *patterns: str) -> int:
        """Freeze ``net``'s parameters whose dotted name matches a glob (``"layers.0.*"``);
        how many changed (``nnx_api.finetune.freeze``)."""
        return finetune.freeze(self.net, *patterns)

    def unfreeze(self, *patterns: str) -> int:
        """Unfreeze the matching parameters; how many changed."""
        return finetune.unfreeze(self.net, *patterns)

    def frozen(self) -> list[str]:
        """The frozen parameter names of ``net``, sorted."""
        return finetune.frozen(self.net)

    def load_pretrained(self, source: Any, **options: Any) -> finetune.LoadPretrainedResult:
        """Load the keys a state dict (path, mapping or module) shares with ``net``
        (``nnx_api.finetune.load_pretrained``: ``key_map``, ``strict``, ``prefix``)."""
        return finetune.load_pretrained(self.net, pretrained_source(source), **options)

    def export_state_dict(self, path: str | os.PathLike[str]) -> str:
        """Save ``net.state_dict()`` alone (``torch.save``; tensors only, so it loads with
        ``torch.load(path, weights_only=True)`` and ``load_pretrained``); returns the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.save(self.net.state_dict(), target)
        return str(path)

    # ------------------------------------------------------------------ inference
    def _forward_all(self, data: Any) -> torch.Tensor:
        """The logits of all of ``data`` as one tensor on the model's device (the inference pass
        ``predict`` / ``predict_proba`` convert to NumPy: ``nnx_api.parts.inference.forward_all``)."""
        return inference.forward_all(self, data)

    def predict(self, X: Any) -> PredictResult:
        """Raw outputs and decoded predictions (argmax classes, thresholded labels, or values) of
        ``X``: a tensor, an ndarray, a tuple of them, or a loader of batches (targets ignored).
        Both are NumPy arrays on the host (``PredictResult``); an empty input raises
        ``PredictionInputError`` (a ``ValueError`` and a ``RuntimeError``)."""
        return inference.predict(self, X)

    def predict_proba(self, X: Any, spec: ProbabilitySpec | None = None) -> PredictionResult:
        """Logits, probabilities, decoded predictions and row ids of ``X``, as NumPy arrays.
        ``spec`` declares how logits become probabilities (``ProbabilitySpec``); without one the
        model's ``TaskSpec`` decides (softmax / sigmoid; None for regression), and without a
        ``TaskSpec`` either it raises ``ParamsError`` (a ``TypeError``): the spec is never
        inferred. Eval mode, each submodule's mode restored."""
        return inference.predict_proba(self, X, spec)

    def iter_predict(self, X: Any, spec: ProbabilitySpec | None = None, *, rich: bool = False) -> PredictionStream:
        """Stream the predictions of a loader one batch at a time: a ``PredictionStream`` (use it
        as a context manager) of ``PredictionBatch(logits, classes, sample_ids)``, or with a
        ``spec`` / ``rich=True`` of ``PredictionResult`` (NumPy arrays, as the eager calls return);
        concatenated they equal the eager result. ``rich=True`` without a ``spec`` needs the
        model's ``TaskSpec``, as ``predict_proba`` does. An empty loader yields nothing."""
        return inference.iter_predict(self, X, spec, rich=rich)

    def evaluate(
        self, loader: Any, extra_metrics: Mapping[str, Callable[[Any, Any], float]] | None = None,
        metrics: Sequence[Any] = (),
    ) -> EvaluationDataPoint:
        """Score a loader of ``(inputs, targets)``: loss (Σ numerators / Σ valid targets), error,
        accuracy, macro F1/precision/recall and declared ``metrics``, each over the whole pass.
        With a ``TaskSpec`` the record also holds the task ``kind`` and ``count`` (valid
        targets; a regression adds ``metrics.mse`` / ``metrics.mae``); without one both stay
        None, as in NNx's records.

        ``extra_metrics`` (``{name: fn(y_true, y_pred) -> float}``) are called once, on the
        NumPy arrays of every valid target and decoded prediction; their values land in ``extra``.
        """
        fns = check_extra_metrics("evaluate.extra_metrics", extra_metrics)
        metrics = tuple(metrics)  # checked as train() checks them: before any batch is read
        problems = resolve(metrics, self.params.resolved_task.kind, self.head.width) if metrics else []
        if problems:
            raise ParamsError("evaluate.metrics", "; ".join(problems))
        acc = EpochAccumulator(self.task_adapter, self.head.width, metrics, full_scores=True)
        extras = ExtraMetrics(self.task_adapter, fns) if fns else None
        if score(self, inference.first_batch_checked(self, loader), acc, extras) == 0:
            raise TrainingInputError("evaluate() loader produced zero samples: the evaluation loader yielded no batches")
        if not float(acc.loss.count):
            raise TrainingInputError(
                "evaluate() loader produced zero non-ignored samples: every target is left out (equal to the "
                "ignore_index, or a NaN regression target); give the loader at least one target to score"
            )
        fields = acc.result()
        if self.params.task is None:
            fields.pop("count", None)  # NNx writes count with a TaskSpec only
        edp = EvaluationDataPoint(**fields)
        return edp if extras is None else attrs.evolve(edp, extra=extras.values(extras.whole()))

    # ------------------------------------------------------------------ checkpoints
    @classmethod
    def from_checkpoint(
        cls, checkpoint: NNCheckpoint | str, tag: Any = LAST, *, device: Any = None,
        root: str | os.PathLike[str] | None = None, module: nn.Module | None = None, storage: Any = None,
        batch_adapter: BatchAdapter | None = None, precision: Any = None,
    ) -> NNModel:
        """Rebuild a model from a committed checkpoint: an ``NNCheckpoint``
        (``NNCheckpoint.load(run=..., type=...)``), or a run id and ``tag``. The weights' blob is
        verified against its SHA-256 and decoded with the safe loader. ``device`` overrides the
        trained device (a CUDA-trained run loads on a CPU-only host with ``device="cpu"``),
        ``precision`` the precision policy; a custom module is given again as ``module=`` (its
        parameter names and shapes must match), a registered ``ModelSpec`` is rebuilt by its
        factory. ``storage``: the store the run lives in (default: files under ``root``).
        With an ``NNCheckpoint`` the second positional argument is the device, as in NNx's
        ``from_checkpoint(checkpoint, device=None)``: the handle names its own tag."""
        if isinstance(checkpoint, NNCheckpoint):
            if isinstance(tag, torch.device) or tag != LAST:
                if device is not None:
                    raise ParamsError("NNModel.from_checkpoint", "an NNCheckpoint names its own tag; give the device once")
                device = tag
        else:
            swapped(checkpoint, tag, call="NNModel.from_checkpoint")  # (root, id)
            tag_argument(tag, checkpoint)  # (id, root): the root given where the tag belongs
            run = NNRun.load(checkpoint, root, storage=storage)
            checkpoint = NNCheckpoint.of(run.require_checkpoint(tag))
        params = checkpoint.model_params
        if device is not None:
            params = dataclasses.replace(params, device=device)
        if precision is not None:
            params = dataclasses.replace(params, precision=precision)
        missing = _missing_device(params.device())
        if missing is not None:
            raise ParamsError(
                "NNModel.from_checkpoint.device",
                f"the checkpoint was trained on {params.device} and this machine has no {missing}; pass device='cpu'",
            )
        restoring = _RESTORING.set(True)
        try:
            model = cls._restored(checkpoint, params, module, batch_adapter)
        finally:
            _RESTORING.reset(restoring)
        model.net.load_state_dict(checkpoint.net_state)
        return model

    @classmethod
    def _restored(cls, checkpoint: NNCheckpoint, params: NNModelParams, module: nn.Module | None,
                  batch_adapter: BatchAdapter | None) -> NNModel:
        """The model a checkpoint's parameters build (``from_checkpoint``), its weights not loaded."""
        if checkpoint.net_params is not None:
            model = cls(checkpoint.net_params, params, batch_adapter=batch_adapter)
        elif isinstance(params.net, ModelSpec):
            model = cls(params=params, batch_adapter=batch_adapter)
            _check_same_shapes(model.net, checkpoint.net_state)  # a changed factory is refused before loading
        else:
            if module is None:
                raise MissingModelFactoryError(
                    f"run {checkpoint.run_id} trained a runtime module no factory rebuilds (the checkpoint is not "
                    "reconstructible); pass module=<a fresh instance of it> to from_checkpoint"
                )
            trained = (checkpoint.module_signature or {}).get("class")
            mismatch = _module_mismatch(module, checkpoint.module_signature, checkpoint.net_state)
            if mismatch is not None:
                raise ResumeMismatchError(
                    f"the given module ({class_path(type(module))}) does not match the descriptor of the checkpoint's weights "
                    f"(trained as {trained}): {mismatch}; pass a fresh instance of the class that was trained"
                )
            if trained is not None and trained.rpartition(".")[2] != type(module).__qualname__.rpartition(".")[2]:
                warnings.warn(
                    f"run {checkpoint.run_id} trained a {trained}; the given {class_path(type(module))} has the same "
                    "parameter names and shapes, so its weights load, but its forward may compute something else",
                    UserWarning, stacklevel=3,
                )
            params = dataclasses.replace(params, net=None)  # the descriptor of the given module
            model = cls(params=params, module=module, batch_adapter=batch_adapter)
        return model

    def to_onnx(self, path: str | os.PathLike[str] | None = None, example_input: Any = None, **options: Any) -> Any:
        """Export ``net`` to ONNX, traced on ``example_input`` with a dynamic batch axis
        (``nnx_api.runs.export.to_onnx``: ``opset`` or torch's ``opset_version``, ``input_names``,
        ``output_names``, ``dynamic_batch``, ``check``, ``dynamo``, and the ``torch.onnx.export``
        keywords docs/export.md lists; a keyword NNx does not take is a ``ParamsError`` naming it,
        raised before anything is written; needs the ``export`` extra). Returns the file's path.
        ``example_input`` is checked as ``predict`` checks its inputs (dtype, a built-in net's
        ``input_dim``; ``ParamsError``), and a folder given as ``path`` is refused."""
        if example_input is not None:
            example_input = inference.checked_example(self, example_input, "to_onnx(example_input=...)")
        return to_onnx(self, path, example_input, **options)

    # ------------------------------------------------------------------ training
    def run_config(self, params: NNTrainParams, salt: str | None) -> dict[str, Any]:
        """The configuration whose content address is the run id (``nnx_api.config.identity``)."""
        return run_config(self.state(), params.state(), salt)

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
        provenance: Any = None,
        compile: Any = None,  # noqa: A002 - NNx's keyword
        **misplaced: Any,
    ) -> NNRun:
        """Train into ``<root>/<run id>/`` and return the committed :class:`NNRun`.

        Every input is validated before anything is written. Each epoch commits durably
        (history → LAST → phase/BEST → deferred writes). A run folder that never committed an
        epoch is removed on failure, so the same configuration can simply be retried.
        ``distributed=nnx.distributed.DDP()`` trains data-parallel on the torchrun group (every
        rank calls ``train``; the writer writes); ``storage=`` a ``Storage`` adapter to keep the
        run in (default: the file system under ``root``, ``$NNX_RUNS`` or ``./runs``).
        NNx's ``provenance=`` is out of scope (``OutOfScopeError``): the attempt record is kept.
        ``compile=CompileSpec(...)`` compiles the built-in FP32 default step's forward and the
        built-in validation's forward of a built-in net (``nnx_api.training.compilation``; what
        happened is ``run.compile``, a ``CompileRecord``); never part of the run id.
        """
        refuse_train_keywords("NNModel.train", NNTrainParams, NNModel.train, misplaced)
        if provenance is not None:
            refuse("NNModel.train(provenance=...)", EXTRAS)
        if distributed is None:
            refuse_process_group("NNModel.train")  # one process: not inside a group of several ranks
        if not isinstance(params, NNTrainParams):
            raise ParamsError("params", f"must be NNTrainParams, got {type(params).__name__}")
        if distributed is not None and not isinstance(distributed, DDP):
            raise ParamsError("distributed", f"must be nnx.distributed.DDP(...), got {type(distributed).__name__}")
        config = self.run_config(params, salt)
        trained = self.__dict__.setdefault("_trained_runs", [])  # (config, id) of each run this object trained
        if trained and params.resume_from_run_id is None and all(config != c for c, _ in trained):
            warnings.warn(
                f"this NNModel object already trained run {trained[-1][1]} in this process, so the new run starts from "
                "those trained weights while its id (which holds no weights) claims a fresh initialization; build a new "
                f"NNModel per run, or continue with resume_from_run_id='{trained[-1][1]}'", UserWarning, stacklevel=2,
            )
        run = launch(
            TrainingEntry(
                kind=NNMODEL, model=self, params=params, train=params,
                config=config, optims={"default": params.optim},
                schedulers={"default": params.scheduler}, primary="default", step_fn=train_step_fn,
                objective=objective, eval_step_fn=eval_step_fn, callbacks=callbacks or (), components=components or (),
                history=history, root=root, storage=storage, distributed=distributed, compile=compile,
            )
        )
        trained.append((config, run.id))
        return run


def _check_same_shapes(net: nn.Module, state: Mapping[str, Any]) -> None:
    """Refuse weights whose names or shapes differ from ``net``'s, before loading any of them, naming
    the keys reshaped, missing (the net has them, the weights do not) and unexpected (the reverse)."""
    have = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    want = {k: tuple(v.shape) for k, v in state.items()}
    if have != want:
        kinds = (("reshaped", sorted(k for k in have.keys() & want.keys() if have[k] != want[k])),
                 ("missing", sorted(have.keys() - want.keys())), ("unexpected", sorted(want.keys() - have.keys())))
        said = "; ".join(f"{kind}: {', '.join(keys[:5])}{', …' if len(keys) > 5 else ''}" for kind, keys in kinds if keys)
        raise ResumeMismatchError(
            f"the checkpoint's weights do not fit this net: its topology does not match the saved weights ({said}); "
            "register the factory that built the trained net under this id and version (a changed topology is a new version)"
        )


__all__ = ["Head", "NNModel", "PredictResult", "PredictionResult", "CorruptRunError"]
