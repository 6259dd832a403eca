"""Fluent, variant-gated builders for the params classes (reached as ``NNOptimParams.builder()``,
``NNSchedulerParams.builder()``, ``NNTrainerParams.builder()``).

    optim = nnx.NNOptimParams.builder().adamw(max_lr=3e-4).grad_clip(1.0).build()
    plateau = nnx.NNSchedulerParams.builder().reduce_on_plateau(patience=3, factor=0.5).build()
    params = (nnx.NNTrainerParams.builder().n_epochs(20)
              .optimizer("gen", optim).optimizer("disc", optim).scheduler("gen", plateau).build())

A variant method (``adam``, ``sgd``, ``step``, ``cosine_annealing``...) sets the fields of its
variant and replaces whatever an earlier variant set (the last one wins); modifiers (``grad_clip``,
``accumulate_grad``, ``param_groups``, ``clock``) survive a variant change in either order. Only the
fields a call touches are forwarded, so ``state()`` (and the run id) equal those of the same params
written by hand. ``copy()`` branches a builder; ``Builder.from_params(p).build() == p``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nnx_core.errors import ParamsError
from nnx_api.config.base import ParamsBuilder
from nnx_api.config.enums import Optims, Schedulers

__all__ = ["NNOptimParamsBuilder", "NNSchedulerParamsBuilder", "NNTrainerParamsBuilder"]

_BETAS = (0.9, 0.999)
_PLATEAU = frozenset({"min_lr", "factor", "patience", "cooldown", "threshold"})


class NNOptimParamsBuilder(ParamsBuilder):
    """Builds ``NNOptimParams``: one of ``adam``, ``adam_amsgrad``, ``adamw``, ``sgd``,
    ``sgd_nesterov`` (``betas`` is PyTorch's name for the Adam ``momentum`` pair), then any of
    ``grad_clip``, ``accumulate_grad``, ``param_groups``."""

    VARIANTS = ("adam", "adam_amsgrad", "adamw", "sgd", "sgd_nesterov")
    VARIANT_FIELDS = frozenset({"name", "max_lr", "momentum", "weight_decay", "eps"})

    def _adam(self, name: Optims, max_lr: float, betas: Sequence[float], weight_decay: float,
              eps: float | None) -> NNOptimParamsBuilder:
        return self._variant(name=name, max_lr=max_lr, momentum=tuple(betas), weight_decay=weight_decay, eps=eps)

    def adam(self, *, max_lr: float, betas: Sequence[float] = _BETAS, weight_decay: float = 0.0,
             eps: float | None = None) -> NNOptimParamsBuilder:
        """``torch.optim.Adam``."""
        return self._adam(Optims.ADAM, max_lr, betas, weight_decay, eps)

    def adam_amsgrad(self, *, max_lr: float, betas: Sequence[float] = _BETAS, weight_decay: float = 0.0,
                     eps: float | None = None) -> NNOptimParamsBuilder:
        """``torch.optim.Adam(amsgrad=True)``."""
        return self._adam(Optims.ADAM_AMSGRAD, max_lr, betas, weight_decay, eps)

    def adamw(self, *, max_lr: float, betas: Sequence[float] = _BETAS, weight_decay: float = 1e-2,
              eps: float | None = None) -> NNOptimParamsBuilder:
        """``torch.optim.AdamW`` (decoupled weight decay, 1e-2 by default as in PyTorch)."""
        return self._adam(Optims.ADAMW, max_lr, betas, weight_decay, eps)

    def sgd(self, *, max_lr: float, momentum: float = 0.9, weight_decay: float = 0.0) -> NNOptimParamsBuilder:
        """``torch.optim.SGD``."""
        return self._variant(name=Optims.SGD, max_lr=max_lr, momentum=momentum, weight_decay=weight_decay)

    def sgd_nesterov(self, *, max_lr: float, momentum: float = 0.9,
                     weight_decay: float = 0.0) -> NNOptimParamsBuilder:
        """``torch.optim.SGD(nesterov=True)``."""
        return self._variant(name=Optims.SGD_NESTEROV, max_lr=max_lr, momentum=momentum, weight_decay=weight_decay)

    def grad_clip(self, norm: float) -> NNOptimParamsBuilder:
        """Clip the global gradient L2 norm to ``norm`` before each update."""
        return self._set(grad_clip_norm=norm)

    def accumulate_grad(self, batches: int) -> NNOptimParamsBuilder:
        """Accumulate gradients over ``batches`` batches per update."""
        return self._set(accumulate_grad_batches=batches)

    def param_groups(self, groups: Sequence[Any]) -> NNOptimParamsBuilder:
        """Per-parameter-group lr / weight decay (``NNParamGroupSpec`` list, copied: changing the
        list afterwards changes no builder)."""
        return self._set(param_groups=list(groups) if isinstance(groups, (list, tuple)) else groups)


class NNSchedulerParamsBuilder(ParamsBuilder):
    """Builds ``NNSchedulerParams``: one of ``reduce_on_plateau``, ``step``, ``cosine_annealing``,
    ``one_cycle``, ``linear_warmup_decay``, and optionally ``clock(...)`` (before or after). The
    five plateau fields (``min_lr``, ``factor``, ``patience``, ``cooldown``, ``threshold``) may be
    given to every variant; those left out keep their defaults. One that the variant's kind does
    not read, given alone with a value other than its default, is refused (``NNSchedulerParams``)."""

    VARIANTS = ("reduce_on_plateau", "step", "cosine_annealing", "one_cycle", "linear_warmup_decay")
    VARIANT_FIELDS = _PLATEAU | {"kind", "step_size", "T_max", "max_lr", "total_steps", "warmup_steps"}

    def reduce_on_plateau(self, *, min_lr: float | None = None, factor: float | None = None,
                          patience: int | None = None, cooldown: int | None = None,
                          threshold: float | None = None) -> NNSchedulerParamsBuilder:
        """Reduce the LR by ``factor`` after ``patience`` epochs without improvement (the default
        schedule; ``kind`` stays unset, as in params written by hand)."""
        return self._variant(min_lr=min_lr, factor=factor, patience=patience, cooldown=cooldown, threshold=threshold)

    def step(self, *, step_size: int, **plateau: Any) -> NNSchedulerParamsBuilder:
        """``StepLR``: multiply the LR by ``factor`` every ``step_size`` ticks."""
        return self._kind(Schedulers.STEP, plateau, step_size=step_size)

    def cosine_annealing(self, *, T_max: int | None = None, **plateau: Any) -> NNSchedulerParamsBuilder:
        """``CosineAnnealingLR`` over ``T_max`` ticks (default: the run's length) down to ``min_lr``."""
        return self._kind(Schedulers.COSINE_ANNEALING, plateau, T_max=T_max)

    def one_cycle(self, *, max_lr: float | None = None, total_steps: int | None = None,
                  **plateau: Any) -> NNSchedulerParamsBuilder:
        """``OneCycleLR`` peaking at ``max_lr`` over ``total_steps`` ticks."""
        return self._kind(Schedulers.ONE_CYCLE, plateau, max_lr=max_lr, total_steps=total_steps)

    def linear_warmup_decay(self, *, warmup_steps: int, total_steps: int | None = None,
                            **plateau: Any) -> NNSchedulerParamsBuilder:
        """Linear warm-up over ``warmup_steps`` ticks, then linear decay to zero at ``total_steps``."""
        return self._kind(Schedulers.LINEAR_WARMUP_DECAY, plateau, warmup_steps=warmup_steps, total_steps=total_steps)

    @classmethod
    def from_params(cls, params: Any) -> NNSchedulerParamsBuilder:
        """A builder holding ``params``' fields that are not at their default; a kind given with
        plateau fields keeps all five, as it was built (one alone may be refused by its kind)."""
        builder = super().from_params(params)
        if "kind" in builder._fields and builder._fields.keys() & _PLATEAU:
            builder._fields.update({name: getattr(params, name) for name in _PLATEAU})
        return builder

    def clock(self, clock: str) -> NNSchedulerParamsBuilder:
        """What one tick counts: ``"epoch"`` (default) or ``"optimizer_update"``."""
        return self._set(clock=clock)

    def _kind(self, kind: Schedulers, plateau: Mapping[str, Any], **fields: Any) -> NNSchedulerParamsBuilder:
        unknown = sorted(set(plateau) - _PLATEAU)
        if unknown:
            raise ParamsError(f"{type(self).__name__}.{kind.value}",
                              f"unknown field(s) {unknown}; besides its own, a variant takes {sorted(_PLATEAU)}")
        return self._variant(kind=kind, **fields, **plateau)


class NNTrainerParamsBuilder(ParamsBuilder):
    """Builds ``NNTrainerParams``: ``n_epochs(n)`` and at least one ``optimizer(name, params)``
    are required; ``scheduler(name, params)`` names an optimizer already given (checked at
    ``build()``); the rest are optional setters."""

    def n_epochs(self, n: int) -> NNTrainerParamsBuilder:
        """Number of epochs (required)."""
        return self._set(n_epochs=n)

    def optimizer(self, name: str, params: Any) -> NNTrainerParamsBuilder:
        """Train the parameters of ``params.param_groups`` (all, with one optimizer) as ``name``."""
        self._fields.setdefault("optims", {})[name] = params
        return self

    def scheduler(self, name: str, params: Any) -> NNTrainerParamsBuilder:
        """Schedule optimizer ``name``'s learning rate."""
        self._fields.setdefault("schedulers", {})[name] = params
        return self

    def seed(self, value: int) -> NNTrainerParamsBuilder:
        """Seed the run (part of the run id)."""
        return self._set(seed=value)

    def data_id(self, value: str) -> NNTrainerParamsBuilder:
        """Name the data this configuration trains on (part of the run id)."""
        return self._set(data_id=value)

    def train_loader(self, loader: Iterable[Any]) -> NNTrainerParamsBuilder:
        """Training batches (not part of the run id)."""
        return self._set(train_loader=loader)

    def val_loader(self, loader: Iterable[Any]) -> NNTrainerParamsBuilder:
        """Validation batches (not part of the run id)."""
        return self._set(val_loader=loader)

    def extra_metrics(self, metrics: Mapping[str, Callable[[Any, Any], float]]) -> NNTrainerParamsBuilder:
        """``{name: fn(y_true, y_pred) -> float}`` (runtime only, never part of the run id)."""
        return self._set(extra_metrics=metrics)  # build() snapshots it, as NNx's builder does

    def metrics(self, *specs: Any) -> NNTrainerParamsBuilder:
        """Declared metrics (``MetricSpec``); replaces an earlier declaration."""
        if len(specs) == 1 and isinstance(specs[0], (list, tuple)):
            specs = tuple(specs[0])
        return self._set(metrics=specs)

    def monitor(self, spec: Any) -> NNTrainerParamsBuilder:
        """What BEST, the plateau scheduler and EarlyStopping follow (``MonitorSpec``)."""
        return self._set(monitor=spec)

    def save_phase_checkpoints(self, value: bool) -> NNTrainerParamsBuilder:
        """Whether to write the FIRST/Q1/Q2/Q3 phase checkpoints (default True)."""
        return self._set(save_phase_checkpoints=value)

    def auto_step_schedulers(self, value: bool) -> NNTrainerParamsBuilder:
        """Whether the Trainer steps every schedule (default True; False leaves it to the step)."""
        return self._set(auto_step_schedulers=value)

    def overwrite_existing(self, value: bool) -> NNTrainerParamsBuilder:
        """Replace an existing run with the same id (not part of the run id)."""
        return self._set(overwrite_existing=value)

    def resume_from(self, run_id: str, checkpoint: str = "last", mode: str = "auto") -> NNTrainerParamsBuilder:
        """Start from ``run_id``'s ``checkpoint`` (a new run; the lineage is part of its id)."""
        return self._set(resume_from_run_id=run_id, resume_from_checkpoint=checkpoint, resume_mode=mode)

    def build(self) -> Any:
        """The ``NNTrainerParams``; refuses a missing ``n_epochs`` or a schedule for no optimizer."""
        where = f"{type(self).__name__}.build"
        if "n_epochs" not in self._fields:
            raise ParamsError(where, "call .n_epochs() first (.n_epochs(N), the number of epochs), e.g. .n_epochs(10).optimizer('main', optim)")
        if not self._fields.get("optims"):
            raise ParamsError(where, "optims must have at least one entry: call .optimizer(name, params) first, "
                                     "e.g. .optimizer('main', NNOptimParams.builder().adam(max_lr=1e-3).build())")
        unknown = sorted(set(self._fields.get("schedulers", {})) - set(self._fields["optims"]))
        if unknown:
            raise ParamsError(where, f".scheduler() called with names not present in the .optimizer() calls: {unknown} "
                                     f"(optimizers: {sorted(self._fields['optims'])}); name the optimizer it drives")
        return super().build()
