"""Typed decisions (the seed's ``nnx.decisions``): ask a trained model a typed question.

Questions and errors come from ``nnx_core.decision_questions``, results and validation from
``nnx_core.decisions``, capabilities from ``nnx_core.decision_capabilities``;
this module adds ``FixedHeadProvider``, which answers them from a trained NNx classifier::

    from nnx_api.decisions import Choice, FixedHeadProvider

    provider = FixedHeadProvider(model, labels=[str(d) for d in range(10)])
    question = Choice("Which digit?", [(str(d), f"the digit {d}") for d in range(10)])
    results = provider.decide(question, X)          # one ChoiceResult per row of X
    results[0].top, results[0].distribution

Deferred jobs (``DecisionJob``, ``Limits``, ``JobResult``: ``nnx_api.decide.jobs``) batch
independent questions into few provider calls and chain dependent ones.
"""

from __future__ import annotations

import contextlib
import gc
import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from nnx_core.decision_capabilities import Capabilities, DecisionProvider
from nnx_core.decision_questions import (
    PRIMITIVES,
    Boolean,
    Choice,
    DecisionError,
    InvalidDecisionRequest,
    InvalidDecisionResponse,
    Option,
    ProviderFailure,
    Question,
    Score,
    UnsupportedCapability,
    question_from_state,
)
from nnx_core.decisions import (
    PROBABILITY_TOLERANCE,
    RESULT_TYPES,
    BooleanResult,
    ChoiceResult,
    DecisionResult,
    ScoreResult,
    deferred_results,
    validate_response,
)
from nnx_api.decide.jobs import (
    DecisionJob,
    Follow,
    InvalidJob,
    JobError,
    JobFailed,
    JobLimitExceeded,
    JobResult,
    JobTimeout,
    Limits,
    QuestionOutcome,
    RowOutcome,
)
from nnx_api.model import NNModel
from nnx_api.parts.inference import PredictionValidationError, ProbabilitySpec
from nnx_api.scope import PROVIDERS, placeholder

_OUT_OF_SCOPE = ("NLIProvider", "JevProvider", "JevError", "JevTimeout", "JevAuthenticationError", "JevRateLimited",
                 "JevMalformedResponse")


def __getattr__(name: str) -> type:
    """NNx's NLI and Jev providers import as placeholders that refuse to be used (``nnx_api.scope``)."""
    if name in _OUT_OF_SCOPE:
        return placeholder(f"nnx.decisions.{name}", PROVIDERS)
    raise AttributeError(f"module 'nnx_api.decisions' has no attribute {name!r}")


__all__ = [
    "PRIMITIVES",
    "PROBABILITY_TOLERANCE",
    "Boolean",
    "BooleanResult",
    "Capabilities",
    "Choice",
    "ChoiceResult",
    "DecisionError",
    "DecisionJob",
    "DecisionProvider",
    "DecisionResult",
    "FixedHeadProvider",
    "Follow",
    "InvalidDecisionRequest",
    "InvalidDecisionResponse",
    "InvalidJob",
    "JobError",
    "JobFailed",
    "JobLimitExceeded",
    "JobResult",
    "JobTimeout",
    "Limits",
    "Option",
    "ProviderFailure",
    "Question",
    "QuestionOutcome",
    "RowOutcome",
    "Score",
    "ScoreResult",
    "UnsupportedCapability",
    "question_from_state",
    "validate_response",
]


def _head(model: Any) -> tuple[str, int | None, tuple[str, ...] | None]:
    """The head's kind, output width and labels. The width of an ``NNModel`` built from a
    ``module=`` without ``TaskSpec(n=...)`` is None: unknown until the head runs (as NNx)."""
    if isinstance(model, NNModel) and model.net_params is None and not (model.params.task and model.params.task.n):
        task = model.params.resolved_task
        return task.kind, None, task.labels
    head = model.head
    return head.kind, int(head.width), head.labels


def _labels(value: Any, width: int | None) -> tuple[str, ...]:
    """``value`` checked as a head's labels: unique non-empty strings, one per output unit (at
    least two when the width is unknown)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidDecisionRequest(f"labels must be a sequence of strings, got {value!r}")
    labels = tuple(value)
    if any(not isinstance(label, str) or not label for label in labels):
        raise InvalidDecisionRequest(f"labels must be non-empty strings, got {list(labels)}")
    if len(set(labels)) != len(labels):
        raise InvalidDecisionRequest(f"labels must be unique, got {list(labels)}")
    if width is None and len(labels) < 2:
        raise InvalidDecisionRequest(f"a categorical head needs at least two labels, got {list(labels)}")
    if width is not None and len(labels) != width:
        raise InvalidDecisionRequest(
            f"{len(labels)} labels for a head with {width} output classes: give one label per output unit"
        )
    return labels


class _DistributionRows:
    """One batch's validated probabilities (question order) and logits (class order)."""

    __slots__ = ("digest", "ids", "labels", "probabilities", "logits")

    def __init__(self, digest: str, ids: tuple[str, ...], labels: tuple[str, ...],
                 probabilities: Any, logits: Any) -> None:
        self.digest, self.ids, self.labels = digest, ids, labels
        self.probabilities, self.logits = probabilities, logits

    def fields(self, index: int) -> dict[str, Any]:
        return {
            "question_digest": self.digest,
            "distribution": tuple(zip(self.ids, self.probabilities[index].tolist(), strict=True)),
            "provider": FixedHeadProvider.name,
            "raw": self.logits[index].copy(),  # the row's logits (float64, class order), owned
        }


class _BooleanRows:
    """One batch's validated ``p_true`` values and logits."""

    __slots__ = ("digest", "p_true", "logits")

    def __init__(self, digest: str, p_true: Any, logits: Any) -> None:
        self.digest, self.p_true, self.logits = digest, p_true, logits

    def fields(self, index: int) -> dict[str, Any]:
        return {
            "question_digest": self.digest,
            "p_true": float(self.p_true[index]),
            "provider": FixedHeadProvider.name,
            "raw": self.logits[index:index + 1].copy(),  # the row's one logit (float64), owned
        }


def _refuse_invalid_rows(probabilities: torch.Tensor, sums: bool) -> None:
    """Vectorised ``validate_response`` for a batch: finite, in [0, 1], rows sum to 1."""
    low, high = torch.aminmax(probabilities)
    ok = bool(low >= 0.0) and bool(high <= 1.0)  # NaN compares False
    if ok and sums:
        ok = bool(((probabilities.sum(dim=-1) - 1.0).abs() <= PROBABILITY_TOLERANCE).all())
    if ok:
        return
    rows = probabilities.reshape(len(probabilities), -1)
    bad = ~(torch.isfinite(rows).all(-1) & (rows >= 0).all(-1) & (rows <= 1).all(-1))
    if sums:
        bad |= (rows.sum(-1) - 1.0).abs() > PROBABILITY_TOLERANCE
    row = int(bad.nonzero()[0, 0])
    raise InvalidDecisionResponse(
        f"input row {row}: the model's probabilities {rows[row].tolist()} are not a "
        "valid answer (non-finite logits?); answers are never renormalised"
    )


def _softmax64(logits: torch.Tensor) -> torch.Tensor:
    """Row softmax of float64 logits (max-subtracted; a few times faster than ``torch.softmax``
    on narrow float64 rows). Non-finite logits give NaN rows, which validation refuses."""
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    shifted.exp_()
    shifted /= shifted.sum(dim=-1, keepdim=True)
    return shifted


def _uses_nnmodel_inference(model: Any) -> bool:
    """Whether ``model.predict_proba`` is ``NNModel.predict_proba`` itself (not overridden by a
    subclass or on the instance), whose logits are exactly ``model._forward_all(rows)``."""
    return (
        isinstance(model, NNModel)
        and type(model).predict_proba is NNModel.predict_proba
        and "predict_proba" not in vars(model)
    )


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a batch of results is allocated: in a process
    holding torch's many tracked objects, thousands of allocations otherwise trigger full
    collections that cost more than the results themselves (the results form no cycles)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class FixedHeadProvider:
    """Answers typed questions from a trained model's fixed output head.

    * A categorical head answers ``Choice`` (and ``Score`` when ``ordinal=True``: the levels map
      to the classes in class order, lowest first).
    * A single Bernoulli logit (head kind ``"bernoulli"``, or ``"multilabel"`` of width 1)
      answers only the ``Boolean`` it was trained for, given as ``question=``.
    * Regression and multi-output multilabel heads raise ``UnsupportedCapability`` here, at
      construction: no typed question fits them. The width of an ``NNModel`` built from a
      ``module=`` without ``TaskSpec(n=...)`` shows only when the head runs: a multi-output
      Bernoulli head is then refused on the first ``decide`` (``UnsupportedCapability``), and
      labels that do not fit a categorical head too (``InvalidDecisionRequest``).

    ``labels`` default to ``model.head.labels``; there must be one per output unit. A request's
    option ids must be the labels (any order), or map onto them one-to-one through
    ``option_map = {option_id: label}``. Probabilities are recomputed from the logits in float64,
    put in the question's order and validated (never renormalised); each result's ``raw`` holds
    a copy of its row's logits. ``max_batch`` caps the rows of a request: a larger batch is
    refused before the model runs (``UnsupportedCapability``), as NNx does.

    The model is run through ``predict_proba``; for a plain ``NNModel`` the provider takes the
    logits from the inference pass ``predict_proba`` is built on, without the float32
    probabilities it would compute and ``decide`` would discard (see ``_logits``).

    Attributes (read them, do not set them): ``name`` (the provider id, ``"nnx.fixed_head"``, as
    NNx names it), ``labels`` (the head's labels in class order, or None for an unlabelled
    Bernoulli head), ``option_map``, ``ordinal``, ``question`` (the Boolean a Bernoulli head
    answers) and the ``model_calls`` counter.
    """

    name = "nnx.fixed_head"

    def __init__(self, model: Any, labels: Sequence[str] | None = None,
                 option_map: Mapping[str, str] | None = None, ordinal: bool = False,
                 max_batch: int | None = None, question: Question | None = None) -> None:
        kind, width, head_labels = _head(model)
        if kind == "regression":
            raise UnsupportedCapability("a regression head answers no typed question")
        if kind == "multilabel" and width not in (None, 1):
            raise UnsupportedCapability(
                f"a multi-output Bernoulli head (multilabel, {width} outputs) answers no single typed question; "
                "only a one-output head (a Bernoulli logit) can answer a Boolean"
            )
        if kind not in ("categorical", "bernoulli", "multilabel"):
            raise UnsupportedCapability(f"unknown head kind {kind!r}")
        if max_batch is not None and (
            isinstance(max_batch, bool) or not isinstance(max_batch, numbers.Integral) or max_batch < 1
        ):
            raise InvalidDecisionRequest(f"max_batch must be a positive integer or None, got {max_batch!r}")

        self._model = model
        self._bernoulli = kind != "categorical"
        self._width_known = width is not None  # not for a module= head without TaskSpec(n=...)
        self._max_batch = None if max_batch is None else int(max_batch)
        self._model_calls = 0
        self.ordinal = bool(ordinal)
        self.question = question
        if labels is not None and head_labels is not None and tuple(labels) != tuple(head_labels):
            raise InvalidDecisionRequest(
                f"labels {tuple(labels)} disagree with the model's task labels {tuple(head_labels)}; "
                "leave labels= out to use the task's"
            )
        raw_labels = head_labels if labels is None else labels

        if self._bernoulli:
            self._width = 1
            if width not in (None, 1):
                raise UnsupportedCapability(
                    f"a multi-output Bernoulli head has {width} logits; only a one-output head answers a Boolean"
                )
            if question is None:
                raise InvalidDecisionRequest(
                    "a Bernoulli head needs the Boolean it answers: pass question=Boolean(...), the one it was "
                    "trained for"
                )
            if not isinstance(question, Boolean):
                raise InvalidDecisionRequest(
                    f"question must be a Boolean (the one this Bernoulli head was trained for), got "
                    f"{type(question).__name__}"
                )
            if ordinal or option_map:
                raise InvalidDecisionRequest("ordinal= and option_map= apply to categorical heads only")
            self.labels = None if raw_labels is None else _labels(raw_labels, 1)
            self.option_map: dict[str, str] = {}
            self._capabilities = Capabilities(  # the NNModel underneath also trains and exports, as NNx says
                primitives={"boolean"}, questions={question.digest()}, max_batch=self._max_batch, training=True, export=True
            )
            return

        if width is not None and width < 2:
            raise UnsupportedCapability(f"a categorical head needs at least two classes, got {width}")
        if question is not None:
            raise InvalidDecisionRequest(
                "question= is for Bernoulli heads; a categorical head answers by its labels (any question "
                "whose options map onto them)"
            )
        if raw_labels is None:
            raise InvalidDecisionRequest(
                "a categorical head needs its label space: pass labels=[...] (one per class) or declare "
                "TaskSpec.categorical(..., labels=...)"
            )
        self.labels = _labels(raw_labels, width)
        self._width = len(self.labels)
        self.option_map = self._check_option_map(option_map)
        self._class_of = {label: index for index, label in enumerate(self.labels)}
        self._capabilities = Capabilities(
            primitives={"choice", "score"} if self.ordinal else {"choice"},
            labels=self.labels,
            max_batch=self._max_batch,
            training=True,
            export=True,
        )

    def _check_option_map(self, option_map: Mapping[str, str] | None) -> dict[str, str]:
        if option_map is None:
            return {}
        if not isinstance(option_map, Mapping):
            raise InvalidDecisionRequest(
                f"option_map must be a mapping {{option_id: label}}, got {option_map!r}"
            )
        mapping = dict(option_map)
        unknown = [label for label in mapping.values() if label not in self.labels]
        if unknown:
            raise InvalidDecisionRequest(f"option_map names labels the head does not have: {unknown}")
        if len(set(mapping.values())) != len(mapping):
            raise InvalidDecisionRequest(
                "option_map must be one-to-one (a bijection onto the head's labels): two option ids map to one label"
            )
        return mapping

    @property
    def model(self) -> Any:
        """The model this provider answers from."""
        return self._model

    @property
    def model_calls(self) -> int:
        """How many times the model was run, one inference pass per ``decide`` (refused or
        empty requests do not count)."""
        return self._model_calls

    def capabilities(self) -> Capabilities:
        """What this provider answers: the primitives, its labels and ``max_batch``."""
        return self._capabilities

    def _label_ids(self, question: Question) -> tuple[str, ...] | None:
        if not isinstance(question, (Choice, Boolean, Score)):
            raise InvalidDecisionRequest(f"expected a Choice, Boolean or Score, got {question!r}")
        if isinstance(question, Boolean):
            return None
        if not self.option_map:
            return question.option_ids
        unseen = [option_id for option_id in question.option_ids if option_id not in self.option_map]
        if unseen:
            raise UnsupportedCapability(f"unseen option ids {unseen}: option_map maps {sorted(self.option_map)}")
        return tuple(self.option_map[option_id] for option_id in question.option_ids)

    def _row_count(self, inputs: Any) -> int:
        """The rows of ``inputs`` (a tensor or array, or a tuple of them: the first one's rows);
        text inputs are a modality this provider does not read."""
        first = inputs[0] if isinstance(inputs, tuple) and inputs else inputs
        if isinstance(first, str) or (isinstance(first, (list, tuple)) and first and isinstance(first[0], str)):
            raise UnsupportedCapability(
                f"this provider reads tensor inputs (a tensor, an array or a tuple of them), not text; "
                f"got {type(inputs).__name__}"
            )
        if isinstance(first, (torch.Tensor, np.ndarray)) and first.ndim >= 1:
            return int(first.shape[0])
        try:
            return len(inputs)
        except TypeError as error:
            raise InvalidDecisionRequest(
                f"inputs must be a batch of rows (tensor or array), got {type(inputs).__name__}"
            ) from error

    def check(self, question: Question, inputs: Any) -> None:
        """Refuse (``UnsupportedCapability`` / ``InvalidDecisionRequest``) what ``decide`` would
        refuse, without calling the model."""
        bound = self.question
        if isinstance(question, Boolean) and bound is not None and question.digest() != bound.digest():
            raise UnsupportedCapability(
                f"this head answers only the Boolean it was trained for, {bound.prompt!r}; not {question.prompt!r}"
            )
        count = self._row_count(inputs)
        self._capabilities.check(
            question, modality="tensor", batch_size=count, label_ids=self._label_ids(question),
        )

    def decide(self, question: Question, inputs: Any) -> list[DecisionResult]:
        """One validated result per row of ``inputs``, in row order, from one model call; ``[]``
        for no rows. A batch larger than ``max_batch`` is refused (``UnsupportedCapability``)."""
        self.check(question, inputs)
        count = self._row_count(inputs)
        if count == 0:
            return []
        columns = None
        if not self._bernoulli:
            order = [self._class_of[label] for label in self._label_ids(question)]
            if order != list(range(self._width)):
                columns = torch.tensor(order)
        return self._answer(question, self._logits(inputs, count), columns)

    def _spec(self) -> ProbabilitySpec:
        """The head's ``ProbabilitySpec`` (classes on axis 1, its labels)."""
        if self._bernoulli:
            return ProbabilitySpec("bernoulli", 1, self.labels)
        return ProbabilitySpec("categorical", 1, self.labels)

    def _logits(self, rows: Any, count: int) -> torch.Tensor:
        """Run the model once, restoring every module's train/eval flag afterwards.

        For an ``NNModel`` whose ``predict_proba`` is ``NNModel``'s own, the logits come straight
        from the inference pass it builds on (``NNModel._forward_all``: eval mode, inference
        mode, the model's autocast), so the float32 softmax, argmax and row ids that
        ``predict_proba`` would add, and ``decide`` would discard, are not computed. Any other
        model (or an overridden ``predict_proba``) is asked through ``predict_proba(rows, spec).logits``,
        with the ``ProbabilitySpec`` of this head (NNx's call).
        """
        model = self._model
        net = model.net
        flags = [(module, module.training) for module in net.modules()]
        direct = _uses_nnmodel_inference(model)
        self._model_calls += 1
        try:
            output = model._forward_all(rows) if direct else model.predict_proba(rows, self._spec())
        except PredictionValidationError as error:
            raise InvalidDecisionRequest(f"{self.name}: the head's output does not fit its labels: {error}") from error
        except Exception as error:
            raise ProviderFailure(f"the model failed while answering: {error!r}") from error
        finally:
            for module, training in flags:
                module.training = training
        logits = output if direct else output.logits
        if isinstance(logits, np.ndarray) and logits.dtype.kind == "f":  # NNModel.predict_proba's NumPy logits
            logits = torch.from_numpy(logits)
        if not isinstance(logits, torch.Tensor):
            raise InvalidDecisionResponse(
                f"the model returned logits of type {type(logits).__name__}, not a float array or tensor"
            )
        logits = logits.detach()
        if self._bernoulli and logits.dim() == 1:
            logits = logits.unsqueeze(-1)
        if tuple(logits.shape) != (count, self._width):
            if not self._width_known and logits.dim() == 2 and len(logits) == count:  # the width shows only now
                if self._bernoulli:
                    raise UnsupportedCapability(
                        f"a Boolean needs a one-output head; this head gives {logits.shape[1]} logits a row")
                raise InvalidDecisionRequest(
                    f"{self.name}: the head's output does not fit its labels: {logits.shape[1]} logits a row for "
                    f"the {self._width} labels {list(self.labels)}")
            raise InvalidDecisionResponse(
                f"the model returned logits of shape {tuple(logits.shape)}, "
                f"expected {(count, self._width)}"
            )
        return logits.to(device="cpu", dtype=torch.float64)

    def _answer(self, question: Question, logits: torch.Tensor, columns: torch.Tensor | None) -> list[DecisionResult]:
        digest = question.digest()
        if self._bernoulli:
            p_true = torch.sigmoid(logits[:, 0])
            _refuse_invalid_rows(p_true, sums=False)
            rows = _BooleanRows(digest, p_true.numpy(), logits[:, 0].numpy())
        else:
            probabilities = _softmax64(logits)
            if columns is not None:
                probabilities = probabilities[:, columns]
            _refuse_invalid_rows(probabilities, sums=True)
            rows = _DistributionRows(digest, question.option_ids, self.labels,
                                     probabilities.numpy(), logits.numpy())
        with _collector_paused():
            return deferred_results(RESULT_TYPES[question.kind], rows, len(logits))

