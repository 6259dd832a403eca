"""What a search draws and how much it spends: the parameters of a ``SearchSpace`` (float, int,
categorical) and the ``SearchBudget``. Each parameter checks its bounds when made and knows its
``state()`` (what a stored study is tied to) and ``size()`` (how many values a grid has)."""

from __future__ import annotations

import math
from typing import Any

import attrs

from nnx_core.errors import ParamsError

PRIMITIVES = (type(None), bool, int, float, str)


# ---------------------------------------------------------------------------------- the space
def _check_bounds(where: str, low: Any, high: Any) -> None:
    """``low < high``, both finite real numbers (a range of one value is a constant, not a search)."""
    for field, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ParamsError(f"{where}.{field}", f"must be a finite number, got {value!r}")
    if not low < high:
        raise ParamsError(where, f"low must be < high, got low={low!r}, high={high!r}")


@attrs.frozen
class FloatParam:
    """A float in ``[low, high]`` (``log`` scale, or a grid of ``step``)."""

    name: str
    low: float
    high: float
    log: bool = False
    step: float | None = None

    def __attrs_post_init__(self) -> None:
        where = f"FloatParam({self.name!r})"
        _check_bounds(where, self.low, self.high)
        if self.log and self.low <= 0:
            raise ParamsError(f"{where}.low", f"a log scale needs low > 0, got {self.low!r}")
        if self.step is not None and (self.log or not self.step > 0):
            raise ParamsError(f"{where}.step", f"must be > 0 and is not combined with log=True, got {self.step!r}")

    def suggest(self, trial: Any) -> float:
        return trial.suggest_float(self.name, self.low, self.high, log=self.log, step=self.step)

    def state(self) -> dict[str, Any]:
        """``{"kind": "float", "name", "low", "high"}``, with ``log`` / ``step`` only when set (as NNx writes it)."""
        return _bounded_state("float", self, log=self.log, step=self.step)

    def size(self) -> int | None:
        return None if self.step is None else int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1


@attrs.frozen
class IntParam:
    """An int in ``[low, high]`` (``log`` scale, or every ``step``)."""

    name: str
    low: int
    high: int
    log: bool = False
    step: int = 1

    def __attrs_post_init__(self) -> None:
        where = f"IntParam({self.name!r})"
        _check_bounds(where, self.low, self.high)
        if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < 1:
            raise ParamsError(f"{where}.step", f"must be an int >= 1, got {self.step!r}")
        if self.log and (self.low < 1 or self.step != 1):
            raise ParamsError(f"{where}.low", f"a log scale needs low >= 1 and step 1, got low={self.low!r}, step={self.step!r}")

    def suggest(self, trial: Any) -> int:
        return trial.suggest_int(self.name, self.low, self.high, log=self.log, step=self.step)

    def state(self) -> dict[str, Any]:
        """``{"kind": "int", "name", "low", "high"}``, with ``log`` / ``step`` only when not the default."""
        return _bounded_state("int", self, log=self.log, step=None if self.step == 1 else self.step)

    def size(self) -> int | None:
        return None if self.log else (self.high - self.low) // self.step + 1


@attrs.frozen
class CategoricalParam:
    """One of ``choices``; choices that are not plain scalars (tuples such as hidden sizes) are
    offered to Optuna by their ``repr`` and mapped back."""

    name: str
    choices: tuple[Any, ...] = attrs.field(converter=tuple)

    def __attrs_post_init__(self) -> None:
        if not self.choices:
            raise ParamsError(f"CategoricalParam({self.name!r}).choices", "give at least one choice")
        if len({repr(c) for c in self.choices}) != len(self.choices):
            raise ParamsError(f"CategoricalParam({self.name!r}).choices", f"choices must be distinct, got {self.choices!r}")

    def suggest(self, trial: Any) -> Any:
        if all(isinstance(c, PRIMITIVES) for c in self.choices):
            return trial.suggest_categorical(self.name, list(self.choices))
        labels = {repr(c): c for c in self.choices}
        return labels[trial.suggest_categorical(self.name, list(labels))]

    def size(self) -> int | None:
        return len(self.choices)

    def state(self) -> dict[str, Any]:
        """``{"kind": "categorical", "name", "choices": [...]}`` (a tuple choice as a list)."""
        return {"kind": "categorical", "name": self.name,
                "choices": [list(c) if isinstance(c, tuple) else c for c in self.choices]}


def _bounded_state(kind: str, param: Any, *, log: bool, step: Any) -> dict[str, Any]:
    state: dict[str, Any] = {"kind": kind, "name": param.name, "low": param.low, "high": param.high}
    if log:
        state["log"] = True
    if step is not None:
        state["step"] = step
    return state


Param = FloatParam | IntParam | CategoricalParam


class SearchSpace:
    """The parameters a search draws, each named by where ``apply`` puts it."""

    def __init__(self, *params: Param) -> None:
        names = [p.name for p in params]
        if not params:
            raise ParamsError("SearchSpace", "give at least one parameter")
        if len(set(names)) != len(names):
            raise ParamsError("SearchSpace", f"parameter names must be unique, got {names}")
        self.params: tuple[Param, ...] = tuple(params)

    def state(self) -> list[dict[str, Any]]:
        """Every parameter's ``state()``, in order: what a stored study is tied to."""
        return [p.state() for p in self.params]

    def sample(self, trial: Any) -> dict[str, Any]:
        """One value per parameter, asked from ``trial``."""
        return {p.name: p.suggest(trial) for p in self.params}

    def size(self) -> int | None:
        """How many distinct combinations there are (None: unbounded)."""
        total = 1
        for p in self.params:
            n = p.size()
            if n is None:
                return None
            total *= n
        return total


@attrs.frozen(kw_only=True)
class SearchBudget:
    """How much to spend: ``trials`` asked in all, optionally ``updates_per_trial`` committed
    optimizer updates per trial and a ``deadline_seconds`` for the whole search."""

    trials: int
    updates_per_trial: int | None = None
    deadline_seconds: float | None = None

    def __attrs_post_init__(self) -> None:
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise ParamsError("SearchBudget.trials", f"must be an int >= 1, got {self.trials!r}")
        if self.updates_per_trial is not None and self.updates_per_trial < 1:
            raise ParamsError("SearchBudget.updates_per_trial", "must be >= 1 or None")
        if self.deadline_seconds is not None and not self.deadline_seconds > 0:
            raise ParamsError("SearchBudget.deadline_seconds", "must be > 0 or None")
