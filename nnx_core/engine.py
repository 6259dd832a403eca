"""The shared update engine: how an objective's loss terms become committed optimizer updates.

This module owns the objective path of the seed's lifecycle (§2, "In an objective run the shared
update engine accumulates each microbatch's loss terms"). Read ``UpdateEngine.add`` top to bottom:

    per microbatch     each term: numerator (a sum over its samples), denominator (how many
                       samples; 0 = fully masked; none for a sum term), weight
                       numbers finite?  no → "fail": raise before backward / "skip": drop window
                       back-propagate the weighted numerators (GradientSlots port)
    window end         W_t = Σ denominators of each mean term over the window
                       no live term (every W_t == 0, no sum term) → nothing commits
                       combine:  grad = Σ_t weight_t · Σ_mb ∇numerator_t / W_t   (sum terms: / 1)
                       every optimizer: the one update tail (``nnx_core.update.commit_window``:
                       unscale → finite check → clip → step)
                       one committed update per optimizer, reported together (``Commit``); the
                       caller announces it (``nnx_core.update.announce``)

So K microbatches of any sizes and masks give exactly the update of one batch of their union.

Gradients live in the framework; the engine only decides *what* to back-propagate into *which*
slot and *how* to combine the slots (``GradientSlots``). Slot 0 is the parameters' own
gradients. A window of one microbatch knows every W_t before its backward, so it back-propagates
the final weighted loss once into slot 0. A longer window needs one slot per *scale class*: all
sum terms share one (their scale is known), every mean term has its own (its 1/W_t is known only
at the window's end). With a single class (one mean term, or only sum terms) everything goes to
slot 0 and is rescaled at the end, like the default step; side buffers exist only with ≥2 classes.

No framework imports: numbers in, decisions out; tensors stay behind the ports.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from nnx_core.errors import NonFiniteLossError, TrainingInputError
from nnx_core.ports import GradientSlots, LossScale, Optimizer
from nnx_core.update import COMMITTED, MASKED, NONFINITE, NONFINITE_POLICIES, commit_window

MEAN, SUM = "mean", "sum"
REDUCTIONS = (MEAN, SUM)


@attrs.frozen(kw_only=True)
class TermReading:
    """One microbatch's loss term as plain numbers (the framework reads its tensors once)."""

    name: str
    numerator: float
    denominator: float | None = None
    reduction: str = MEAN
    weight: float = 1.0


def reading_problems(term: TermReading) -> list[str]:
    """Why a term cannot be accounted (numerator finiteness is the nonfinite policy's business)."""
    problems = []
    if term.reduction not in REDUCTIONS:
        problems.append(f"term {term.name!r}: reduction must be 'mean' or 'sum', got {term.reduction!r}")
    elif term.reduction == MEAN:
        d = term.denominator
        if d is None or not math.isfinite(d) or d < 0:
            problems.append(
                f"term {term.name!r}: a mean term needs a finite denominator ≥ 0 (its sample count; 0 = fully "
                f"masked), got {d!r}"
            )
    elif term.denominator is not None:
        problems.append(f"term {term.name!r}: a sum term takes no denominator, got {term.denominator!r}")
    if not math.isfinite(term.weight):
        problems.append(f"term {term.name!r}: weight must be finite, got {term.weight!r}")
    return problems


@attrs.frozen(kw_only=True)
class Commit:
    """What a closed window did.

    ``status``: "committed" (every optimizer stepped once), "masked" (no live term), "nonfinite"
    (dropped under ``nonfinite="skip"``), "overflow" (a loss scale skipped it). ``update_idx`` is
    each stepped optimizer's 1-based update count; ``losses`` each live term's window value
    (Σnum/Σden, or Σnum); ``loss`` their weighted sum.
    """

    status: str
    microbatches: int
    update_idx: Mapping[str, int] = attrs.field(factory=dict)
    losses: Mapping[str, float] = attrs.field(factory=dict)
    loss: float | None = None

    @property
    def committed(self) -> bool:
        return self.status == COMMITTED


@attrs.define
class _Window:
    """The open window's layout (fixed by its first microbatch) and running sums."""

    names: tuple[str, ...] = ()
    reductions: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    slots: tuple[int, ...] = ()  # slot of each term
    classes: tuple[str | None, ...] = ()  # per slot: None = the sum terms, else the mean term's name
    direct: bool = False  # a one-microbatch window: final scales known before the backward
    numerators: list[float] = attrs.field(factory=list)
    denominators: list[float] = attrs.field(factory=list)
    microbatches: int = 0
    poisoned: bool = False

    def open(self, terms: Sequence[TermReading], *, direct: bool) -> None:
        self.names = tuple(t.name for t in terms)
        self.reductions = tuple(t.reduction for t in terms)
        self.weights = tuple(float(t.weight) for t in terms)
        classes: list[str | None] = []
        slots = []
        for t in terms:
            key = None if t.reduction == SUM else t.name
            if key not in classes:
                classes.append(key)
            slots.append(0 if direct else classes.index(key))
        self.slots = tuple(slots)
        self.classes = (None,) if direct else tuple(classes)
        self.direct = direct
        self.numerators = [0.0] * len(terms)
        self.denominators = [0.0] * len(terms)
        self.microbatches = 0
        self.poisoned = False

    def same_layout(self, terms: Sequence[TermReading]) -> bool:
        return (
            tuple(t.name for t in terms) == self.names
            and tuple(t.reduction for t in terms) == self.reductions
            and tuple(float(t.weight) for t in terms) == self.weights
        )


class UpdateEngine:
    """Accumulates loss terms over update windows and commits one update per optimizer per window.

    ``optimizers`` are named ``Optimizer`` ports (NNModel: ``{"default": ...}``; Trainer: its
    named optimizers), stepped in the given order; ``max_norms`` their clipping norms. It is the
    checkpointed component ``nnx.update_engine`` (commits, skipped windows, update counts).
    """

    COMPONENT = "nnx.update_engine"

    def __init__(
        self,
        optimizers: Mapping[str, Optimizer],
        gradients: GradientSlots,
        *,
        accumulate: int = 1,
        max_norms: Mapping[str, float | None] | None = None,
        nonfinite: str = "fail",
        loss_scale: LossScale | None = None,
    ) -> None:
        if not optimizers:
            raise ValueError("the update engine needs at least one optimizer")
        if isinstance(accumulate, bool) or not isinstance(accumulate, int) or accumulate < 1:
            raise ValueError(f"accumulate must be an integer ≥ 1, got {accumulate!r}")
        if nonfinite not in NONFINITE_POLICIES:
            raise ValueError(f"nonfinite must be 'fail' or 'skip', got {nonfinite!r}")
        self.optimizers = dict(optimizers)
        self.gradients = gradients
        self.accumulate = accumulate
        self.max_norms = dict(max_norms or {})
        self.nonfinite = nonfinite
        self.loss_scale = loss_scale
        self.commits = 0
        self.skipped = 0
        self.update_counts = {name: 0 for name in self.optimizers}
        self._window = _Window()

    # ------------------------------------------------------------------ per microbatch
    @property
    def window_open(self) -> bool:
        """Whether microbatches are waiting for their window's end."""
        return self._window.microbatches > 0

    def add(self, terms: Sequence[TermReading], *, is_last_batch: bool) -> Commit | None:
        """Account one microbatch; at its window's end commit and return what happened."""
        if not terms:
            raise TrainingInputError("an objective must return at least one LossTerm")
        problems = [p for t in terms for p in reading_problems(t)]
        if len({t.name for t in terms}) != len(terms):
            problems.append(f"term names must be unique within a microbatch, got {[t.name for t in terms]}")
        if problems:
            raise TrainingInputError("; ".join(problems))
        w = self._window
        ends = w.microbatches + 1 >= self.accumulate or is_last_batch
        if w.microbatches == 0:
            w.open(terms, direct=ends)
        elif not w.same_layout(terms):
            raise TrainingInputError(
                f"the loss terms changed inside an update window: {list(w.names)} (reductions {list(w.reductions)}, "
                f"weights {list(w.weights)}) then {[t.name for t in terms]}; keep names, reductions and weights "
                "fixed across the microbatches of a window"
            )
        w.microbatches += 1
        finite = all(math.isfinite(t.numerator) for t in terms)
        if not finite and self.nonfinite == "fail":
            self._close_discarding()
            bad = [t.name for t in terms if not math.isfinite(t.numerator)]
            raise NonFiniteLossError(
                f"non-finite training loss: loss term(s) {bad} are not finite; no parameter was updated. Lower the "
                "learning rate, check the inputs for NaN/inf, or use an Objective with nonfinite='skip' to drop such windows"
            )
        if not finite:
            w.poisoned = True
        if not w.poisoned:
            plan = self._plan(terms)
            if plan:  # a fully masked microbatch has nothing to back-propagate
                self.gradients.backward(plan)
            for i, t in enumerate(terms):
                if t.reduction == SUM:
                    w.numerators[i] += t.numerator
                elif t.denominator:  # a masked microbatch adds nothing (like its gradient)
                    w.numerators[i] += t.numerator
                    w.denominators[i] += t.denominator
        return self._close() if ends else None

    def _plan(self, terms: Sequence[TermReading]) -> list[tuple[int, list[tuple[int, float]]]]:
        """Which weighted numerators of this microbatch go into which gradient slot."""
        w = self._window
        parts: dict[int, list[tuple[int, float]]] = {}
        for i, t in enumerate(terms):
            if t.reduction == MEAN and not t.denominator:
                continue  # fully masked here: its numerator sums nothing, its gradient is zero
            scale = w.weights[i]
            if w.direct and t.reduction == MEAN:
                scale /= t.denominator  # type: ignore[operator]  # the window is this microbatch
            if scale == 0.0:
                continue
            parts.setdefault(w.slots[i], []).append((i, scale))
        return sorted(parts.items())

    # ------------------------------------------------------------------ window end
    def _close(self) -> Commit:
        w = self._window
        micro = w.microbatches
        losses: dict[str, float] = {}
        loss = 0.0
        live_classes: set[str | None] = set()
        for i, name in enumerate(w.names):
            if w.reductions[i] == SUM:
                value = w.numerators[i]
                live_classes.add(None)
            elif w.denominators[i] > 0:
                value = w.numerators[i] / w.denominators[i]
                live_classes.add(name)
            else:
                continue  # masked over the whole window: no value, no gradient
            losses[name] = value
            loss += w.weights[i] * value
        if w.poisoned:
            return self._skip(NONFINITE, micro)
        if not losses:
            return self._skip(MASKED, micro, {})
        if w.direct:
            factors = [1.0]
        else:
            factors = []
            for key in w.classes:
                if key is None:
                    factors.append(1.0)
                else:
                    den = w.denominators[w.names.index(key)]
                    factors.append(1.0 / den if den > 0 else 0.0)
        self.gradients.combine(factors)
        status = commit_window(
            self.optimizers, None, max_norms=self.max_norms, nonfinite=self.nonfinite, loss_scale=self.loss_scale
        )  # raises (nonfinite="fail") before any parameter changes; the gradients are cleared either way
        self.gradients.discard()  # the tail cleared the parameters' gradients; the side buffers go too
        self._window = _Window()
        if status != COMMITTED:
            self.skipped += 1
            return Commit(status=status, microbatches=micro, losses=dict(losses), loss=loss)
        self.commits += 1
        for name in self.optimizers:
            self.update_counts[name] += 1
        return Commit(
            status=COMMITTED,
            microbatches=micro,
            update_idx={name: self.update_counts[name] for name in self.optimizers},
            losses=losses,
            loss=loss,
        )

    def _skip(self, status: str, micro: int, losses: Mapping[str, float] | None = None, loss: float | None = None) -> Commit:
        self._close_discarding()
        self.skipped += 1
        return Commit(status=status, microbatches=micro, losses=dict(losses or {}), loss=loss if losses else None)

    def _close_discarding(self) -> None:
        self.gradients.discard()
        for opt in self.optimizers.values():
            opt.zero_grad()
        self._window = _Window()

    # ------------------------------------------------------------------ component state
    def component_spec(self) -> tuple[str, int]:
        """Name and schema version of the checkpointed counters."""
        return (self.COMPONENT, 1)

    def component_state(self) -> dict[str, Any]:
        """Commits, skipped windows and each optimizer's update count."""
        return {"commits": self.commits, "skipped": self.skipped, "update_counts": dict(self.update_counts)}

    def check_component_state(self, state: Mapping[str, Any], *, version: int | None = None) -> list[str]:
        """A checkpoint of other optimizers cannot continue these counts."""
        saved = state.get("update_counts")
        if not isinstance(saved, Mapping) or set(saved) != set(self.update_counts):
            return [f"{self.COMPONENT}: saved optimizers {sorted(saved or {})} != {sorted(self.update_counts)}"]
        return []

    def load_component_state(self, state: Mapping[str, Any], *, version: int | None = None) -> None:
        """Continue the counters."""
        self.commits, self.skipped = int(state["commits"]), int(state["skipped"])
        self.update_counts = {name: int(n) for name, n in state["update_counts"].items()}
