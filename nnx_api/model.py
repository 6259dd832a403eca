"""``NNModel``: a network plus its loss/task, trained into durable content-addressed runs."""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import attrs
import numpy as np
import torch
from torch import nn

from nnx_core.commit import LAST, RunFiles
from nnx_core.errors import (
    CorruptRunError,
    ParamsError,
    PrecisionUnsupportedError,
    ResumeMismatchError,
    RunExistsError,
    RunNotFoundError,
    TrainingInputError,
    UpdateOwnerError,
)
from nnx_core.history import EagerHistory
from nnx_core.identity import validate_run_id, validate_tag
from nnx_core.lifecycle import run_lifecycle
from nnx_core.schedules import check_run_budget
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.pytorch.metrics import EpochAccumulator, resolve
from nnx_adapters.pytorch.optim import TorchOptimizer, build_optimizer, named_params
from nnx_adapters.pytorch.tasks import TaskAdapter
from nnx_api.callbacks import Callback, EarlyStopping, normalize_callbacks
from nnx_api.runs.journal import check_continuation, check_history, open_history, with_history_access
from nnx_api.training import objectives
from nnx_api.config.metrics import monitor_problems
from nnx_api.config.params import NNModelParams, NNParams, NNTrainParams
from nnx_api.runs.run import NNRun, dump_yaml, runs_root
from nnx_api.training.session import TrainingSession, new_attempt, now, progress_enabled, restored_modes, split_batch, to_device


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
        if policy.mode == "fp16" and self.device.type != "cuda":
            if policy.fallback == "fp32":
                return "fp32"
            raise PrecisionUnsupportedError(
                "fp16 needs CUDA (it uses a GradScaler); use PrecisionPolicy('bf16') on CPU or fallback='fp32'"
            )
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
                inputs = to_device(inputs, self.device)
                out = self.net(*inputs) if isinstance(inputs, tuple) else self.net(inputs)
                outputs.append(out)
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

    def evaluate(self, loader: Any, metrics: Sequence[Any] = ()) -> Any:
        """Score a loader of ``(inputs, targets)``: loss (Σ numerators / Σ valid targets), error,
        accuracy, macro F1/precision/recall and declared ``metrics``, each over the whole pass."""
        from nnx_core.records import EvaluationDataPoint

        acc = EpochAccumulator(self.task_adapter, self.head.width, tuple(metrics), full_scores=True)
        task = self.task_adapter
        batches = 0
        with restored_modes(self.net), torch.inference_mode(), self.autocast_context()():
            self.net.eval()
            for batch in loader:
                inputs, target = split_batch(batch)
                inputs, target = to_device(inputs, self.device), to_device(target, self.device)
                out = self.net(*inputs) if isinstance(inputs, (tuple, list)) else self.net(inputs)
                task.check(out, target)
                loss_sum, count = task.loss_terms(out, target)
                acc.add_loss(loss_sum, count)
                acc.update(out, target)
                batches += 1
        if batches == 0:
            raise TrainingInputError("the evaluation loader yielded no batches")
        return EvaluationDataPoint(**acc.result())

    # ------------------------------------------------------------------ checkpoints
    @classmethod
    def from_checkpoint(
        cls, run_id: str, tag: str = LAST, *, root: str | os.PathLike[str] | None = None, module: nn.Module | None = None
    ) -> NNModel:
        """Rebuild a model from a committed checkpoint (weights verified against their SHA-256)."""
        run = NNRun.load(run_id, root)
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
        from nnx_api.runs.export import to_onnx

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

    def _check_train(self, params: Any, callbacks: list[Callback], train_step_fn: Any, objective: Any) -> None:
        if not isinstance(params, NNTrainParams):
            raise ParamsError("params", f"must be NNTrainParams, got {type(params).__name__}")
        if params.train_loader is None:
            raise TrainingInputError("NNTrainParams.train_loader is missing; pass train_loader=<DataLoader of (x, y)>")
        try:
            if len(params.train_loader) == 0:
                raise TrainingInputError("train_loader is empty; give it at least one batch")
        except TypeError:
            pass  # no len(): an empty loader is caught in the first epoch, before anything commits
        if train_step_fn is not None and objective is not None:
            raise UpdateOwnerError("give either train_step_fn or objective (one update owner per run), not both")
        if not any(p.requires_grad for p in self.net.parameters()):
            raise ParamsError("model", "no parameter requires grad; did you freeze every parameter?")
        problems = resolve(params.metrics, self.params.resolved_task.kind, self.head.width)
        if problems:
            raise ParamsError("NNTrainParams.metrics", "; ".join(problems))
        monitor = params.monitor
        problems = monitor_problems(monitor, params.metrics, self.params.resolved_task.kind, params.val_loader is not None)
        if problems:
            raise ParamsError("NNTrainParams.monitor", "; ".join(problems))
        for cb in callbacks:
            if isinstance(cb, EarlyStopping):
                cb.check_run(monitor)

    def _optimizer(self, params: NNTrainParams) -> TorchOptimizer:
        optim = params.optim
        trainable = [(n, p) for n, p in self.net.named_parameters() if p.requires_grad]
        groups: list[dict[str, Any]] = []
        if optim.param_groups:
            taken: set[str] = set()
            for spec in optim.param_groups:
                members = [p for n, p in trainable if n not in taken and fnmatch.fnmatch(n, spec.name_pattern)]
                taken.update(n for n, p in trainable if fnmatch.fnmatch(n, spec.name_pattern))
                if members:
                    groups.append({"params": members, **spec.overrides(optim.max_lr)})
            rest = [p for n, p in trainable if n not in taken]
            if rest:
                groups.append({"params": rest})
        else:
            groups = [{"params": [p for _, p in trainable]}]
        opt = build_optimizer(
            optim.name.value, groups, lr=optim.max_lr, momentum=optim.momentum, weight_decay=optim.weight_decay, eps=optim.eps
        )
        return TorchOptimizer(opt, named_params(self.net))

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
    ) -> NNRun:
        """Train into ``<root>/<run id>/`` and return the committed :class:`NNRun`.

        Every input is validated before anything is written. Each epoch commits durably
        (history → LAST → phase/BEST → deferred writes). A run folder that never committed an
        epoch is removed on failure, so the same configuration can simply be retried.
        """
        from nnx_api import distributed as nnx_distributed  # data parallel: nnx_api.distributed

        if distributed is not None:  # distributed=DDP(): every rank runs this call; the writer writes
            return nnx_distributed.train_distributed(
                self, params, distributed, callbacks=callbacks, train_step_fn=train_step_fn, eval_step_fn=eval_step_fn,
                salt=salt, root=root, components=components, objective=objective, history=history,
            )
        nnx_distributed.refuse_process_group("NNModel.train")
        cbs = normalize_callbacks(callbacks)
        self._check_train(params, cbs, train_step_fn, objective)
        journal = check_history(history, cbs)  # history=HistoryJournal(...): bounded memory (nnx_api.runs.journal)
        session_factory = objectives.session_factory(self, train_step_fn=train_step_fn, objective=objective, callbacks=cbs)
        config = self.run_config(params, salt)
        base = runs_root(root)
        run = NNRun(config=config, root=base)
        storage = FileStorage(base)
        files = RunFiles(storage, run.id)
        source = self._resume_source(params, base)
        resumed_schedule = source[0].get("schedule") if source and source[1] else None
        check_run_budget(params, nnx_owns_windows=train_step_fn is None, resumed_schedule=resumed_schedule)
        return self._admit_and_train(
            run, files, params, cbs, train_step_fn, eval_step_fn, components or (),
            source=source, journal=journal, session_factory=session_factory,
        )

    def _admit_and_train(
        self, run: NNRun, files: RunFiles, params: Any, cbs, step_fn, eval_fn, components, *, source, journal,
        session_factory,
    ) -> NNRun:
        """Under the run lease: admit the run (create, overwrite, or continue with resume="auto"),
        then train. A run that never committed is removed on failure so its id can be retried."""
        storage = files.storage
        with storage.lease(run.id):
            if admit(files, params):
                return self._continue(
                    run, files, params, cbs, step_fn, eval_fn, components, journal=journal,
                    session_factory=session_factory,
                )
            storage.clean_temporaries(run.id)  # a kill before run.yaml can leave only temporaries
            run = attrs.evolve(run, resume_status=source[2] if source else None)
            try:
                run.save(eager_history=journal is None)
                return self._train_session(
                    run, files, params, cbs, step_fn, eval_fn, components, source=source, fresh=True,
                    journal=journal, session_factory=session_factory,
                )
            except Exception:  # a run that never committed is removed, so the id can simply be retried
                with contextlib.suppress(Exception):
                    if not storage.exists(files.tag_path(LAST)):
                        storage.remove_tree(run.id)
                raise

    def _resume_source(self, params: NNTrainParams, base: Any) -> tuple[dict[str, Any], bool, dict[str, Any]] | None:
        """Load and verify the resume point of ``resume_from_run_id`` before anything is written."""
        found = read_resume_source(params, base)
        return None if found is None else found[1:]

    def _continue(
        self, run: NNRun, files: RunFiles, params: NNTrainParams, cbs, step_fn, eval_fn, components, *, journal=None,
        session_factory=None,
    ) -> NNRun:
        """``resume="auto"``: continue this configuration's own run from its committed LAST."""
        files.storage.clean_temporaries(run.id)
        last = files.read_tag(LAST)
        assert last is not None
        loaded = NNRun.load(run.id, run.root)
        payload = torch_state.decode(files.read_blob(last.blobs["state"]), where=f"run {run.id} LAST")
        if last.epoch + 1 >= params.n_epochs or _attempt_completed(files):  # e.g. an early stop
            self.net.load_state_dict(payload["weights"])  # the caller's model is the finished one
            return loaded
        check_continuation(files, journal)
        status = {"mode": "stateful", "source_run": run.id, "source_checkpoint": LAST, "source_epoch": last.epoch}
        run = attrs.evolve(run, idps=loaded.idps, resume_status=status)
        return self._train_session(
            run, files, params, cbs, step_fn, eval_fn, components, source=(payload, True, status), fresh=False,
            journal=journal, session_factory=session_factory,
        )

    def _train_session(
        self, run, files, params, cbs, step_fn, eval_fn, components, *, source, fresh: bool, journal=None,
        session_factory=None,
    ) -> NNRun:
        if params.seed is not None and source is None:
            torch_state.set_seed(params.seed)
        optimizer = self._optimizer(params)
        start, offset = 0, 0
        history = EagerHistory(run.idps if not fresh else ()) if journal is None else open_history(files, journal, fresh=fresh)
        cbs = with_history_access(cbs, history)  # history_access="full" callbacks read the whole journal
        if source is not None:
            start = int(source[0]["epoch"]) + 1
            offset = 0 if not fresh else start  # a new lineage run trains n_epochs more epochs
        session = (session_factory or TrainingSession)(  # objectives/Trainer/fp16: nnx_api.training.objectives
            model=self,
            params=params,
            run=run,
            files=files,
            callbacks=cbs,
            components=components,
            train_step_fn=step_fn,
            eval_step_fn=eval_fn,
            optimizer=optimizer,
            start_epoch=start,
            phase_offset=offset,
            history=history,
        )
        session._iter_idx = (len(history.idps) if journal is None else history.committed_records) if not fresh else 0
        if source is not None:
            session.restore(source[0], stateful=source[1])
        if not fresh:  # a continuation records its resume only once the restore accepted the checkpoint
            files.storage.write(files.metadata_yaml, dump_yaml(run.metadata()))
        session.committed_epoch = history.idps[-1].epoch_idx if history.idps else None
        attempt = new_attempt(run.id)
        session.attempt = attempt
        attempt.save(files)
        optimizer.zero_grad()
        show = progress_enabled(params.progress)
        try:
            with _progress(session, show):
                run_lifecycle(session, cbs, session.ctx, base=Callback)
        except BaseException as exc:
            self._on_failure(files, session, attempt, exc, fresh)
            raise
        # a stop at an update boundary leaves LAST at the last committed epoch: resume="auto" continues it
        attempt.status, attempt.finished_at = "stopped" if session.stopped_at_update() else "completed", now()
        attempt.save(files)
        result = NNRun.load(run.id, run.root)
        result = attrs.evolve(result, resume_status=run.resume_status)
        if show:
            print(f"Run saved to {_display_path(result.path)}", file=sys.stderr if os.environ.get("NNX_QUIET") else sys.stdout)
        return result

    @staticmethod
    def _on_failure(files: RunFiles, session: TrainingSession, attempt: Any, exc: BaseException, fresh: bool) -> None:
        """Remove a run that never committed (so the id can be retried); else mark the attempt failed."""
        if not isinstance(exc, Exception):
            return  # a crash/kill: leave everything as it is
        try:
            if fresh and session.committed_epoch is None and not files.storage.exists(files.tag_path(LAST)):
                files.storage.remove_tree(files.run_id)
                return
            attempt.status, attempt.finished_at = "failed", now()
            attempt.error = f"{type(exc).__name__}: {str(exc)[:500]}"
            attempt.save(files)
        except Exception:  # the training error is the one to report
            pass


def admit(files: RunFiles, params: Any) -> bool:
    """Admission of a run under its lease: True to continue it from its committed LAST
    (``resume="auto"``); False for a fresh run — a folder that never committed, or one being
    overwritten, is removed first; an existing run is refused unless told what to do with it.

    A folder without LAST whose attempt record still says "running" belongs to a writer that was
    killed before its first commit (we hold the lease, so it is not alive): it is removed, as
    that writer would have removed it on an ordinary error."""
    if not files.exists():
        return False
    if files.read_tag(LAST) is None and _abandoned(files):
        files.storage.remove_tree(files.run_id)  # a killed first attempt: nothing was committed
        return False
    if params.resume == "auto":
        if files.read_tag(LAST) is not None:
            return True
    elif not params.overwrite_existing:
        raise RunExistsError(
            f"run {files.run_id} already exists under {getattr(files.storage, 'root', 'the runs root')}. "
            "Pass overwrite_existing=True to replace it, salt='...' or data_id='...' for a distinct run, "
            "or resume='auto' to continue it"
        )
    files.storage.remove_tree(files.run_id)
    return False


def _abandoned(files: RunFiles) -> bool:
    """Whether the run's attempt record says "running" (read under the run's lease)."""
    try:
        doc = json.loads(files.storage.read(files.attempt))
    except (FileNotFoundError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("status") == "running"


def read_resume_source(params: Any, base: Any) -> tuple[bytes, dict[str, Any], bool, dict[str, Any]] | None:
    """The resume point of ``params.resume_from_run_id``: its blob (verified against its SHA-256),
    the decoded payload, whether the resume is stateful, and the resume status to record.
    Refusals (unknown run or tag, weights-only point for ``resume_mode="stateful"``) come first."""
    if params.resume_from_run_id is None:
        return None
    source_id = validate_run_id(params.resume_from_run_id)
    tag = validate_tag(params.resume_from_checkpoint)
    source = NNRun.load(source_id, base)
    checkpoint = source.checkpoint(tag)
    if checkpoint is None:
        raise RunNotFoundError(f"run {source_id} has no committed {tag!r} checkpoint (tags: {source.tags()})")
    data = source.files().read_blob(checkpoint.manifest.blobs["state"], verify=True)
    payload = torch_state.decode(data, where=f"run {source_id} tag {tag!r}")
    stateful = "optimizer" in payload
    if params.resume_mode == "stateful" and not stateful:
        raise ResumeMismatchError(f"{source_id}:{tag} holds weights only; use resume_mode='weights_only'")
    stateful = stateful and params.resume_mode != "weights_only"
    status = {
        "mode": "stateful" if stateful else "weights_only",
        "source_run": source_id,
        "source_checkpoint": tag,
        "source_epoch": checkpoint.epoch,
    }
    return data, payload, stateful, status


def _attempt_completed(files: RunFiles) -> bool:
    """Whether the run's last train() attempt finished (all epochs, or a requested stop such as
    EarlyStopping): such a run is complete, and ``resume="auto"`` must not train it further."""
    import json

    try:
        return json.loads(files.storage.read(files.attempt)).get("status") == "completed"
    except (FileNotFoundError, ValueError):
        return False


def _display_path(path: os.PathLike[str]) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return rel.replace(os.sep, "/") if not rel.startswith("..") else str(path)


@contextlib.contextmanager
def _progress(session: TrainingSession, show: bool) -> Iterator[None]:
    """A tqdm bar over epochs, updated once per commit with loss and the monitored value."""
    if not show:
        yield
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=len(session.epochs()), desc=f"run {session.run.id[:8]}", unit="epoch", leave=False)
    commit = session.commit

    def commit_and_report(epoch: int) -> None:
        commit(epoch)
        idp = session.history.idps[-1]
        train = idp.train_summary or idp.train_edp
        post = {"loss": f"{train.loss:.4g}" if train.loss is not None else "-"}
        if idp.val_edp is not None and idp.val_edp.loss is not None:
            post["val_loss"] = f"{idp.val_edp.loss:.4g}"
        if idp.val_edp is not None and idp.val_edp.accuracy is not None:
            post["val_acc"] = f"{idp.val_edp.accuracy:.3f}"
        bar.set_postfix(post, refresh=False)
        bar.update(1)

    session.commit = commit_and_report  # type: ignore[method-assign]
    try:
        yield
    finally:
        bar.close()


__all__ = ["Head", "NNModel", "PredictResult", "PredictionResult", "CorruptRunError"]
