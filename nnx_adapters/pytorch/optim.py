"""torch adapters for the ``Optimizer`` and ``Clock`` ports."""

from __future__ import annotations

import fnmatch
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

from nnx_core.errors import ParamsError, UpdateOwnerError
from nnx_core.ports import ClockKind

OPTIMIZERS = {
    "sgd": lambda groups, lr, m, wd, eps: torch.optim.SGD(groups, lr=lr, momentum=m, weight_decay=wd),
    "sgd_nesterov": lambda groups, lr, m, wd, eps: torch.optim.SGD(
        groups, lr=lr, momentum=m, weight_decay=wd, nesterov=True
    ),
    "adam": lambda groups, lr, m, wd, eps: torch.optim.Adam(groups, lr=lr, betas=m, weight_decay=wd, eps=eps),
    "adam_amsgrad": lambda groups, lr, m, wd, eps: torch.optim.Adam(
        groups, lr=lr, betas=m, weight_decay=wd, eps=eps, amsgrad=True
    ),
    "adamw": lambda groups, lr, m, wd, eps: torch.optim.AdamW(groups, lr=lr, betas=m, weight_decay=wd, eps=eps),
}


def build_optimizer(
    kind: str, groups: Sequence[Mapping[str, Any]], *, lr: float, momentum: Any, weight_decay: float, eps: float
) -> torch.optim.Optimizer:
    """A torch optimizer of ``kind`` over parameter ``groups`` (dicts with "params" and overrides)."""
    return OPTIMIZERS[kind]([dict(g) for g in groups], lr, momentum, weight_decay, eps)


def param_groups(net: torch.nn.Module, name: str, optim: Any, *, strict: bool, required: bool) -> tuple[list[dict], list[str]]:
    """Optimizer ``name``'s parameter groups and the names of the parameters it owns.

    ``optim``: its params (``param_groups``: specs with ``name_pattern`` and ``overrides(max_lr)``;
    ``max_lr``). Not ``strict``: unmatched trainable parameters form a default group."""
    is_valid = getattr(optim, "is_valid", None)
    if is_valid is not None and not is_valid():  # NNx builds such params and refuses them here
        raise ParamsError(
            f"NNTrainerParams.optims[{name!r}]",
            f"invalid config: {optim!r} (momentum must be a (beta1, beta2) pair for Adam-family optimizers, "
            "a float for SGD)",
        )
    trainable = [(n, p) for n, p in net.named_parameters() if p.requires_grad]
    path = f"NNTrainerParams.optims[{name!r}].param_groups"
    if not optim.param_groups:
        if required:
            raise ParamsError(
                path,
                "with several optimizers every optimizer must declare param_groups (which parameters it owns): "
                "scope its parameters via NNOptimParams(param_groups=[NNParamGroupSpec(...)]); "
                "otherwise a parameter would be stepped by more than one optimizer",
            )
        return [{"params": [p for _, p in trainable]}], [n for n, _ in trainable]
    groups: list[dict] = []
    taken: list[str] = []
    for i, spec in enumerate(optim.param_groups):
        members = [(n, p) for n, p in trainable if n not in taken and fnmatch.fnmatch(n, spec.name_pattern)]
        if not members:
            if strict:
                raise ParamsError(f"{path}[{i}]", (
                    f"pattern {spec.name_pattern!r} matches no trainable parameter, so it gives no parameter groups (in "
                    "strict mode every pattern must match one); check it against module.named_parameters()"))
            continue
        groups.append({"params": [p for _, p in members], **spec.overrides(optim.max_lr)})
        taken.extend(n for n, _ in members)
    if not strict:
        rest = [p for n, p in trainable if n not in taken]
        if rest:
            groups.append({"params": rest})
        taken = [n for n, _ in trainable]
    return groups, taken


def qualname(obj: object) -> str:
    """``module.QualName`` of an object's type (recorded to validate resumes)."""
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


class TorchOptimizer:
    """The ``Optimizer`` port over a ``torch.optim.Optimizer``."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, names: Mapping[int, str] | None = None,
        factory: Mapping[str, Any] | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.params: list[torch.Tensor] = [p for g in optimizer.param_groups for p in g["params"]]
        self._names = names or {}
        self.factory = factory  # a registered factory's spec state (id, version, config), else None
        self.keep_grads = False  # True: zero_grad leaves them (a hand-built step context, as NNx's)

    def zero_grad(self) -> None:
        """Drop every gradient (set to None) — the update window's clearing after its update —
        unless ``keep_grads``: a step context built by hand leaves the applied gradients in
        ``.grad`` after the update, as NNx's does (its next window's start drops them)."""
        if not self.keep_grads:
            self.optimizer.zero_grad(set_to_none=True)

    def _grads(self) -> list[torch.Tensor]:
        return [p.grad for p in self.params if p.grad is not None]

    def scale_grads(self, factor: float) -> None:
        """Multiply every gradient by ``factor``."""
        grads = self._grads()
        if grads and factor != 1.0:
            torch._foreach_mul_(grads, factor)

    def unscale(self) -> None:
        """No loss scaling in fp32/bf16; the fp16 adapter overrides this."""

    def grads_finite(self) -> bool:
        """Whether every gradient is finite (one host sync)."""
        grads = self._grads()
        if not grads:
            return True
        norms = torch._foreach_norm(grads)
        return bool(torch.isfinite(torch.stack(norms)).all())

    def clip(self, max_norm: float) -> float:
        """Clip by global L2 norm; return the norm before clipping."""
        return float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))

    def step(self) -> bool:
        """Apply the update."""
        self.optimizer.step()
        return True

    def state(self) -> dict[str, Any]:
        """The torch state dict plus type, topology and (for a registered factory's optimizer) the
        factory's spec, for resume validation."""
        out = {"state_dict": self.optimizer.state_dict(), "type": qualname(self.optimizer), "topology": self.topology()}
        if self.factory is not None:
            out["factory"] = dict(self.factory)
        return out

    def topology(self) -> list[list[list[Any]]]:
        """Per group, ``[name, shape]`` of each parameter (names when known, else index)."""
        return [
            [[self._names.get(id(p), str(i)), list(p.shape)] for i, p in enumerate(g["params"])]
            for g in self.optimizer.param_groups
        ]

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore a state dict saved by :meth:`state`."""
        self.optimizer.load_state_dict(state["state_dict"])

    @property
    def lrs(self) -> list[float]:
        """Current learning rate of each group."""
        return [float(g["lr"]) for g in self.optimizer.param_groups]


def _warmup_decay(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, 1.0 - (step - warmup) / max(1, total - warmup))

    return factor


class TorchClock:
    """The ``Clock`` port over a torch LR scheduler. NNx owns the schedules it steps: a scheduler
    stepped by someone else since the clock's last tick (a step function calling
    ``ctx.scheduler.step()``, so the schedule would run twice as fast) is refused at the next tick
    (``UpdateOwnerError``): torch counts every ``step()`` in ``last_epoch``, one int compared."""

    def __init__(
        self, scheduler: Any, clock: ClockKind, kind: str, budget: int | None = None, *, implicit_budget: bool = False,
        period: int | None = None,
    ) -> None:
        self.scheduler = scheduler
        self._clock = clock
        self.kind = kind
        self.budget = budget
        self.implicit_budget = implicit_budget  # derived from the run's length, not configured
        self.period = period  # a cosine period configured on purpose (T_max), None: left to the run's length
        self.ticks = 0
        self._period_warned = False
        self._seen = getattr(scheduler, "last_epoch", None)  # torch's step count after NNx's last tick

    @property
    def clock(self) -> ClockKind:
        """"epoch" or "optimizer_update"."""
        return self._clock

    def tick(self, value: float | None = None) -> None:
        """One step; plateau schedules step on ``value`` and skip when it is None."""
        stepped = getattr(self.scheduler, "last_epoch", None)
        if self._seen is not None and stepped != self._seen:
            when = "after each committed update" if self._clock == "optimizer_update" else "once at each epoch's end"
            raise UpdateOwnerError(
                f"the {self.kind} schedule was stepped {stepped - self._seen} time(s) outside NNx since NNx last stepped it "
                f"(its scheduler.step() counts {stepped}, NNx's {self._seen}); NNx steps the schedules it builds {when}, so "
                "remove scheduler.step() from your step function, or step it yourself alone under "
                "Trainer(auto_step_schedulers=False)"
            )
        if self.kind == "reduce_lr_on_plateau":
            if value is None:
                return
            self.scheduler.step(value if math.isfinite(value) else float("inf"))
        else:
            self.scheduler.step()
        self.ticks += 1
        self._seen = getattr(self.scheduler, "last_epoch", None)
        self._warn_past_period()

    def _warn_past_period(self) -> None:
        """A cosine schedule past its live ``T_max`` (a restored one included) rises again, as
        torch's formula goes on: warned of once per run, unless this run configured that very
        period (running past a chosen ``T_max`` is the user's choice, as in torch)."""
        period = getattr(self.scheduler, "T_max", None)
        if self._period_warned or not isinstance(self.scheduler, torch.optim.lr_scheduler.CosineAnnealingLR):
            return
        if self.scheduler.last_epoch <= period or period == self.period:
            return
        self._period_warned = True
        unit = "optimizer updates" if self._clock == "optimizer_update" else "epochs"
        warnings.warn(
            f"the cosine_annealing schedule passed its T_max of {period} {unit} (step {self.scheduler.last_epoch}), "
            "so its learning rate now rises again, as torch's CosineAnnealingLR goes on. To anneal over the whole "
            f"run, set T_max to its {unit} (NNSchedulerParams(T_max=...)); a stateful resume keeps the checkpoint's "
            "T_max, so set it in the run that starts the schedule",
            UserWarning,
            stacklevel=3,
        )

    def state(self) -> dict[str, Any]:
        """Scheduler state, kind, clock and tick count."""
        sd = {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"}
        return {"state_dict": sd, "type": qualname(self.scheduler), "clock": self._clock, "ticks": self.ticks}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state`."""
        sd = dict(state["state_dict"])
        if hasattr(self.scheduler, "lr_lambdas"):
            sd["lr_lambdas"] = [None] * len(self.scheduler.lr_lambdas)
        self.scheduler.load_state_dict(sd)
        self.ticks = int(state["ticks"])
        self._seen = getattr(self.scheduler, "last_epoch", None)


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    kind: str,
    *,
    clock: ClockKind,
    horizon: int,
    min_lr: float,
    factor: float,
    patience: int,
    cooldown: int,
    threshold: float,
    mode: str = "min",
    threshold_mode: str = "rel",
    step_size: int | None = None,
    T_max: int | None = None,
    max_lr: float | None = None,
    total_steps: int | None = None,
    warmup_steps: int | None = None,
) -> TorchClock:
    """A scheduler of ``kind``; ``horizon`` is the run's length in ticks (epochs or updates)."""
    if kind == "reduce_lr_on_plateau":
        sched: Any = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer,
            mode=mode,
            factor=factor,
            patience=patience,
            cooldown=cooldown,
            threshold=threshold,
            threshold_mode=threshold_mode,
            min_lr=min_lr,
        )
        budget = None
    elif kind == "step":
        sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=step_size or max(1, horizon // 3), gamma=factor)
        budget = None
    elif kind == "cosine_annealing":
        budget = T_max or horizon
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=budget, eta_min=min_lr)
    elif kind == "one_cycle":
        budget = total_steps or horizon
        peak = max_lr or optimizer.param_groups[0]["lr"]
        sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=peak, total_steps=budget)
    elif kind == "linear_warmup_decay":
        budget = total_steps or horizon
        warm = warmup_steps or max(1, horizon // 10)
        sched = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_decay(warm, budget))
    elif kind == "warmup_cosine":
        # Linear warm-up as linear_warmup_decay's, (s + 1) / warmup of the group's LR for s < warmup;
        # then a cosine from the group's LR down to min_lr (absolute, as cosine_annealing's eta_min)
        # at s = total, held there after. A LambdaLR: the position is last_epoch, so a stateful
        # resume continues it exactly.
        budget = total_steps or horizon
        warm = warmup_steps or max(1, horizon // 10)

        def warmup_cosine(floor: float):  # floor: min_lr as a fraction of the group's own LR
            def factor(step: int) -> float:
                if step < warm:
                    return (step + 1) / warm
                done = min(1.0, (step - warm) / max(1, budget - warm))
                return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * done))

            return factor

        bases = [g.get("initial_lr", g["lr"]) for g in optimizer.param_groups]  # what LambdaLR multiplies
        floors = [min_lr / base if base > 0 else 0.0 for base in bases]
        sched = torch.optim.lr_scheduler.LambdaLR(optimizer, [warmup_cosine(f) for f in floors])
    else:  # pragma: no cover - params validate kinds
        raise ValueError(kind)
    implicit = (T_max if kind == "cosine_annealing" else total_steps) is None  # the horizon, not a configured one
    return TorchClock(sched, clock, kind, budget, implicit_budget=implicit, period=T_max)


def named_params(module: torch.nn.Module) -> dict[int, str]:
    """``id(param) → dotted name`` for topology records."""
    return {id(p): n for n, p in module.named_parameters()}


def trainable(params: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """The parameters that require gradients."""
    return [p for p in params if p.requires_grad]
