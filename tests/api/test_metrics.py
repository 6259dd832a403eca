"""Named metrics: whole-epoch accumulators against scikit-learn, the registry, records and docs.

scikit-learn is the oracle: every built-in metric, accumulated over uneven batches with ignored
targets, equals the scikit-learn function applied once to the concatenated valid rows.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn import metrics as skm

from nnx_core.errors import ParamsError
from nnx_adapters.pytorch.metrics import REGISTRY, EpochAccumulator, register_metric
from nnx_adapters.pytorch.tasks import TaskAdapter
import nnx_api as nnx

from tests.numerics import across_orders

ROOT = Path(__file__).resolve().parents[2]
IGNORE = -100
SIZES = (1, 7, 3, 12, 5, 2, 9)  # uneven batches, one of a single row
TOL = dict(rel=1e-9, abs=1e-12)


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("NNX_PROGRESS", "0")


def categorical_batches(seed: int, classes: int, *, ignore: int | None = IGNORE, rate: float = 0.3):
    """Uneven batches of (logits, targets); about ``rate`` of the targets are ``ignore``."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in SIZES:
        logits = torch.randn(n, classes, generator=g) * 2
        target = torch.randint(0, classes, (n,), generator=g)
        if ignore is not None:
            target = torch.where(torch.rand(n, generator=g) < rate, torch.full_like(target, ignore), target)
        out.append((logits, target))
    return out


def accumulate(batches, task: TaskAdapter, width: int, specs, *, full_scores: bool = True) -> dict:
    acc = EpochAccumulator(task, width, tuple(specs), full_scores=full_scores)
    for output, target in batches:
        loss_sum, count = task.sum_terms(output, target)
        acc.add_loss(loss_sum, count)
        acc.update(output, target)
    return acc.result()


def valid_rows(batches, ignore: int | None = IGNORE):
    """The oracle's view: the concatenated epoch, ignored targets removed."""
    logits = torch.cat([b[0] for b in batches])
    target = torch.cat([b[1] for b in batches])
    if ignore is not None:
        keep = target != ignore
        logits, target = logits[keep], target[keep]
    probs = torch.softmax(logits.float(), -1).double()
    probs = (probs / probs.sum(-1, keepdim=True)).numpy()  # float32 rows sum to 1 ± 1e-7; sklearn checks
    return target.numpy(), logits.argmax(-1).numpy(), probs


CATEGORICAL_SPECS = (
    nnx.MetricSpec(id="accuracy"),
    nnx.MetricSpec(id="f1", name="f1_macro", config={"average": "macro"}),
    nnx.MetricSpec(id="f1", name="f1_micro", config={"average": "micro"}),
    nnx.MetricSpec(id="f1", name="f1_weighted", config={"average": "weighted"}),
    nnx.MetricSpec(id="nll"),
    nnx.MetricSpec(id="brier"),
)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("classes", [3, 5])
@pytest.mark.parametrize("ignore", [IGNORE, None])
def test_categorical_metrics_equal_sklearn_on_the_concatenated_epoch(seed, classes, ignore):
    batches = categorical_batches(seed, classes, ignore=ignore)
    task = TaskAdapter("categorical", "cross_entropy", ignore_index=ignore)
    for full_scores in (True, False):  # validation (confusion) and training-summary accumulators
        got = accumulate(batches, task, classes, CATEGORICAL_SPECS, full_scores=full_scores)
        y, pred, probs = valid_rows(batches, ignore)
        labels = list(range(classes))
        m = got["metrics"]
        assert got["count"] == len(y)
        assert m["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), **TOL)
        assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), **TOL)
        assert got["error"] == pytest.approx(1 - skm.accuracy_score(y, pred), **TOL)
        for average in ("macro", "micro", "weighted"):
            expected = skm.f1_score(y, pred, average=average, zero_division=0)
            assert m[f"f1_{average}"] == pytest.approx(expected, **TOL), average
        assert m["nll"] == pytest.approx(skm.log_loss(y, probs, labels=labels), rel=1e-6)
        assert m["brier"] == pytest.approx(skm.brier_score_loss(y, probs, labels=labels, scale_by_half=False), rel=1e-6)
        assert got["loss"] == pytest.approx(skm.log_loss(y, probs, labels=labels), rel=1e-5)
        if full_scores:  # the built-in validation fields: macro over present labels
            assert got["f1"] == pytest.approx(skm.f1_score(y, pred, average="macro", zero_division=0), **TOL)
            assert got["precision"] == pytest.approx(
                skm.precision_score(y, pred, average="macro", zero_division=0), **TOL
            )
            assert got["recall"] == pytest.approx(skm.recall_score(y, pred, average="macro", zero_division=0), **TOL)


@pytest.mark.parametrize("seed", range(4))
def test_binary_f1_equals_sklearn(seed):
    batches = categorical_batches(seed, 2)
    spec = nnx.MetricSpec(id="f1", config={"average": "binary"})
    got = accumulate(batches, TaskAdapter("categorical", "cross_entropy", ignore_index=IGNORE), 2, [spec])
    y, pred, _ = valid_rows(batches)
    assert got["metrics"]["f1"] == pytest.approx(skm.f1_score(y, pred, average="binary", zero_division=0), **TOL)


def test_sequence_targets_are_flattened_and_masked():
    """(B, T, C) logits with (B, T) targets: every valid position is one sample."""
    g = torch.Generator().manual_seed(7)
    batches = []
    for b in (2, 3, 1):
        logits = torch.randn(b, 4, 3, generator=g)
        target = torch.randint(0, 3, (b, 4), generator=g)
        target[0, -1] = IGNORE
        batches.append((logits, target))
    got = accumulate(batches, TaskAdapter("categorical", "cross_entropy", ignore_index=IGNORE), 3, CATEGORICAL_SPECS)
    flat = [(lg.reshape(-1, 3), t.reshape(-1)) for lg, t in batches]
    y, pred, probs = valid_rows(flat)
    assert got["metrics"]["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), **TOL)
    assert got["metrics"]["f1_weighted"] == pytest.approx(skm.f1_score(y, pred, average="weighted"), **TOL)
    assert got["metrics"]["nll"] == pytest.approx(skm.log_loss(y, probs, labels=[0, 1, 2]), rel=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_regression_mae_and_mse_equal_sklearn(seed):
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.randn(n, 2, generator=g), torch.randn(n, 2, generator=g)) for n in SIZES]
    specs = [nnx.MetricSpec(id="mae"), nnx.MetricSpec(id="mse")]
    got = accumulate(batches, TaskAdapter("regression", "mean_squared_error"), 2, specs)
    out = torch.cat([b[0] for b in batches]).numpy()
    y = torch.cat([b[1] for b in batches]).numpy()
    assert got["metrics"]["mae"] == pytest.approx(skm.mean_absolute_error(y, out), rel=1e-6)
    assert got["metrics"]["mse"] == pytest.approx(skm.mean_squared_error(y, out), rel=1e-6)
    assert got["loss"] == pytest.approx(skm.mean_squared_error(y, out), rel=1e-5)
    assert "accuracy" not in got and "error" not in got


@pytest.mark.parametrize("seed", range(3))
def test_multilabel_accuracy_and_f1_equal_sklearn_on_indicator_matrices(seed):
    g = torch.Generator().manual_seed(seed)
    batches = [(torch.randn(n, 4, generator=g) * 2, (torch.rand(n, 4, generator=g) < 0.4).float()) for n in SIZES]
    specs = [nnx.MetricSpec(id="accuracy")] + [
        nnx.MetricSpec(id="f1", name=f"f1_{a}", config={"average": a}) for a in ("macro", "micro", "weighted")
    ]
    got = accumulate(batches, TaskAdapter("multilabel", "binary_cross_entropy"), 4, specs)
    y = torch.cat([b[1] for b in batches]).long().numpy()
    pred = (torch.sigmoid(torch.cat([b[0] for b in batches])) >= 0.5).long().numpy()
    assert got["metrics"]["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), **TOL)  # subset accuracy
    assert got["accuracy"] == pytest.approx(skm.accuracy_score(y, pred), **TOL)
    for a in ("macro", "micro", "weighted"):
        assert got["metrics"][f"f1_{a}"] == pytest.approx(skm.f1_score(y, pred, average=a, zero_division=0), **TOL)


def test_batch_partition_does_not_change_any_metric():
    """Sums and counts, never a mean of batch means: one big batch == the uneven split."""
    batches = categorical_batches(11, 4)
    task = TaskAdapter("categorical", "cross_entropy", ignore_index=IGNORE)
    split = accumulate(batches, task, 4, CATEGORICAL_SPECS)
    whole = accumulate([(torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))], task, 4, CATEGORICAL_SPECS)
    assert split["count"] == whole["count"]
    # the same logit rows on both sides: argmax-based metrics are exact; nll and brier go through
    # a float32 softmax per batch, which may round a row differently for another batch shape
    # (a softmax over 4 classes: ~10 roundings per row), then sum in float64
    for key in ("accuracy", "f1_macro", "f1_micro", "f1_weighted"):
        assert split["metrics"][key] == whole["metrics"][key], key
    for key in ("nll", "brier"):
        assert split["metrics"][key] == pytest.approx(whole["metrics"][key], rel=across_orders(10, 1.0)), key
    # a mean of batch accuracies would differ on this split
    per_batch = [accumulate([b], task, 4, CATEGORICAL_SPECS) for b in batches]
    naive = np.mean([r["metrics"]["accuracy"] for r in per_batch if r["count"]])
    assert naive != pytest.approx(whole["metrics"]["accuracy"])


@pytest.mark.parametrize(
    "kind, loss, width, specs, make",
    [
        ("categorical", "cross_entropy", 3, CATEGORICAL_SPECS,
         lambda: (torch.randn(5, 3, device="meta"), torch.randint(0, 3, (5,), device="meta"))),
        ("regression", "mean_squared_error", 2, (nnx.MetricSpec(id="mae"), nnx.MetricSpec(id="mse")),
         lambda: (torch.randn(5, 2, device="meta"), torch.randn(5, 2, device="meta"))),
        ("multilabel", "binary_cross_entropy", 3, (nnx.MetricSpec(id="accuracy"), nnx.MetricSpec(id="f1")),
         lambda: (torch.randn(5, 3, device="meta"), torch.rand(5, 3, device="meta"))),
    ],
)
def test_batch_updates_never_read_a_value_back_to_the_host(kind, loss, width, specs, make):
    """On the meta device every host read (``.item()``, ``bool()``, boolean indexing, ``bincount``)
    raises: a batch update that passes here does no per-batch host sync on a GPU either."""
    ignore = IGNORE if kind == "categorical" else None
    for full_scores in (True, False):
        acc = EpochAccumulator(TaskAdapter(kind, loss, ignore_index=ignore), width, specs, full_scores=full_scores)
        for _ in range(3):
            output, target = make()
            acc.update(output, target)
    with pytest.raises((RuntimeError, NotImplementedError)):  # the detector works: a host read fails
        float(torch.ones(2, device="meta").sum())


def test_an_all_masked_pass_has_no_loss_and_no_metrics():
    batches = [(torch.randn(3, 3), torch.full((3,), IGNORE)), (torch.randn(2, 3), torch.full((2,), IGNORE))]
    got = accumulate(batches, TaskAdapter("categorical", "cross_entropy", ignore_index=IGNORE), 3, CATEGORICAL_SPECS)
    assert got == {"count": 0}


def test_a_registered_metric_without_mask_support_sees_only_valid_rows():
    seen: list[torch.Tensor] = []

    class CountRows:
        def __init__(self, config, n_classes):
            self.rows = 0

        def update(self, target, prediction):
            seen.append(target)
            self.rows += target.numel()

        def result(self):
            return float(self.rows)

    register_metric("test_rows", 1, CountRows, input="labels", mode="max", replace=True)
    try:
        batches = categorical_batches(3, 3)
        got = accumulate(
            batches, TaskAdapter("categorical", "cross_entropy", ignore_index=IGNORE), 3, [nnx.MetricSpec(id="test_rows")]
        )
        y, _, _ = valid_rows(batches)
        assert got["metrics"]["test_rows"] == len(y)
        assert all((t != IGNORE).all() for t in seen)
    finally:
        REGISTRY.pop(("test_rows", 1))


# --------------------------------------------------------------------------- specs and registry
def test_metric_spec_label_state_and_reserved_names():
    spec = nnx.MetricSpec(id="f1", config={"average": "micro"}, name="f1_micro")
    assert spec.label == "f1_micro" and nnx.MetricSpec(id="nll").label == "nll"
    assert nnx.MetricSpec.from_state(spec.state()) == spec
    assert nnx.MetricSpec(id="nll").state() == {"id": "nll", "version": 1}
    for reserved in ("loss", "error"):
        with pytest.raises(ParamsError, match="reserved"):
            nnx.MetricSpec(id=reserved)
    with pytest.raises(ParamsError):
        nnx.MetricSpec(id="f1", config=[("average", "macro")])
    with pytest.raises(ParamsError):
        nnx.MetricSpec(id="nll", version=0)


def test_register_metric_refuses_bad_declarations():
    with pytest.raises(ParamsError, match="already registered"):
        register_metric("nll", 1, object, input="probabilities", mode="min")
    with pytest.raises(ParamsError, match="input"):
        register_metric("x_bad", 1, object, input="pixels", mode="min")
    with pytest.raises(ParamsError, match="mode"):
        register_metric("x_bad", 1, object, input="labels", mode="up")


def tiny_model(classes: int = 3, **task):
    model_params = nnx.NNModelParams(task=nnx.TaskSpec.categorical(**task)) if task else nnx.NNModelParams()
    torch.manual_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=classes), model_params)


def tiny_loader(n: int = 30, classes: int = 3, sizes=(7, 5, 11, 7), seed: int = 0, ignore: int | None = None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    if ignore is not None:
        y[::4] = ignore
    out, i = [], 0
    for s in sizes:
        out.append((x[i : i + s], y[i : i + s]))
        i += s
    return out


@pytest.mark.parametrize(
    "specs, match",
    [
        ((nnx.MetricSpec(id="auroc"),), "not registered"),
        ((nnx.MetricSpec(id="nll", version=2),), "not registered"),
        ((nnx.MetricSpec(id="f1", config={"average": "samples"}),), "unknown"),
        ((nnx.MetricSpec(id="mae"),), "continuous"),
    ],
)
def test_bad_metrics_are_refused_before_any_run_folder(tmp_path, specs, match):
    params = nnx.NNTrainParams(n_epochs=1, metrics=specs, train_loader=tiny_loader())
    with pytest.raises(ParamsError, match=match):
        tiny_model().train(params, root=tmp_path)
    assert not any(tmp_path.iterdir())


def test_two_metrics_of_one_name_are_refused_when_the_params_are_built():
    with pytest.raises(ParamsError, match="must be unique; 'nll' is declared twice"):
        nnx.NNTrainParams(n_epochs=1, metrics=(nnx.MetricSpec(id="nll"), nnx.MetricSpec(id="brier", name="nll")))


# --------------------------------------------------------------------------- records of a real run
def test_validation_records_and_training_summary_carry_declared_metrics(tmp_path):
    specs = (nnx.MetricSpec(id="accuracy"), nnx.MetricSpec(id="nll"), nnx.MetricSpec(id="f1", config={"average": "weighted"}))
    train, val = tiny_loader(ignore=IGNORE), tiny_loader(n=25, sizes=(9, 3, 13), seed=1, ignore=IGNORE)
    model = tiny_model(ignore_index=IGNORE)
    params = nnx.NNTrainParams(n_epochs=3, metrics=specs, train_loader=train, val_loader=val, seed=1)
    run = model.train(params, root=tmp_path)

    for epoch, last in run.epochs.items():
        summary, batches = last.train_summary, [i for i in run.idps if i.epoch_idx == epoch]
        assert summary is not None and set(summary.metrics) == {"accuracy", "nll", "f1"}
        # the summary is the whole epoch: loss weighted by each batch's own valid count
        counts = [b.train_edp.count for b in batches]
        assert summary.count == sum(counts) == sum(int((t != IGNORE).sum()) for _, t in train)
        weighted = sum(b.train_edp.loss * b.train_edp.count for b in batches if b.train_edp.count) / summary.count
        assert summary.loss == pytest.approx(weighted, rel=1e-6)
        assert summary.metrics["accuracy"] == pytest.approx(summary.accuracy, abs=1e-12)
        assert all(b.val_edp is None and b.train_summary is None for b in batches[:-1])
        assert set(last.val_edp.metrics) == {"accuracy", "nll", "f1"}

    # the last epoch's validation record was computed with the final weights: check it against sklearn
    y = torch.cat([b[1] for b in val])
    probs = run_model_probs(nnx.NNModel.from_checkpoint(run.id, "last", root=tmp_path), val)
    keep = (y != IGNORE).numpy()
    yv, pv = y.numpy()[keep], probs[keep]
    val_edp = run.epochs[2].val_edp
    assert val_edp.count == keep.sum()
    assert val_edp.metrics["accuracy"] == pytest.approx(skm.accuracy_score(yv, pv.argmax(1)), abs=1e-12)
    assert val_edp.metrics["f1"] == pytest.approx(skm.f1_score(yv, pv.argmax(1), average="weighted"), abs=1e-12)
    assert val_edp.metrics["nll"] == pytest.approx(skm.log_loss(yv, pv, labels=[0, 1, 2]), rel=1e-5)
    assert val_edp.loss == pytest.approx(skm.log_loss(yv, pv, labels=[0, 1, 2]), rel=1e-5)

    # the records survive the round trip through idps.csv
    loaded = nnx.NNRun.load(run.id, tmp_path)
    assert loaded.epochs[2].val_edp.metrics == pytest.approx(dict(val_edp.metrics))
    assert loaded.epochs[2].train_summary == run.epochs[2].train_summary


def run_model_probs(model, loader):
    """The model's probabilities over ``loader``, batch by batch as validation and ``evaluate``
    compute them: the same kernels, so the same argmax (one 25-row batch may round a near-tie of
    two logits the other way on another machine, and flip an accuracy count)."""
    probs = torch.cat([torch.from_numpy(model.predict_proba(x).probabilities) for x, _ in loader]).double()
    return (probs / probs.sum(-1, keepdim=True)).numpy()


def test_evaluate_computes_declared_metrics_over_the_whole_loader(tmp_path):
    model = tiny_model(ignore_index=IGNORE)
    loader = tiny_loader(n=25, sizes=(9, 3, 13), seed=4, ignore=IGNORE)
    edp = model.evaluate(loader, metrics=CATEGORICAL_SPECS)
    y = torch.cat([b[1] for b in loader])
    probs = run_model_probs(model, loader)
    keep = (y != IGNORE).numpy()
    yv, pv = y.numpy()[keep], probs[keep]
    assert edp.metrics["f1_macro"] == pytest.approx(skm.f1_score(yv, pv.argmax(1), average="macro"), abs=1e-12)
    assert edp.metrics["brier"] == pytest.approx(
        skm.brier_score_loss(yv, pv, labels=[0, 1, 2], scale_by_half=False), rel=1e-6
    )


def test_no_summary_without_metrics_or_monitor(tmp_path):
    run = tiny_model().train(nnx.NNTrainParams(n_epochs=1, train_loader=tiny_loader()), root=tmp_path)
    assert run.epochs[0].train_summary is None
    with_monitor = nnx.NNTrainParams(n_epochs=1, train_loader=tiny_loader(), monitor=nnx.MonitorSpec(split="train"))
    run = tiny_model().train(with_monitor, root=tmp_path)
    assert run.epochs[0].train_summary is not None and run.epochs[0].selection.value == run.epochs[0].train_summary.loss


# --------------------------------------------------------------------------- docs
def test_docs_metrics_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "metrics.md").read_text()
    snippets = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(snippets) >= 4
    namespace: dict = {}
    for snippet in snippets:  # one namespace: later examples build on earlier ones
        exec(compile(snippet, "docs/metrics.md", "exec"), namespace)
    assert (tmp_path / "runs").is_dir()


def test_binary_f1_needs_two_classes_or_pools_the_labels_of_a_multilabel_task():
    from nnx_adapters.pytorch.metrics import resolve

    binary = (nnx.MetricSpec(id="f1", config={"average": "binary"}),)
    assert resolve(binary, "categorical") == [] and resolve(binary, "categorical", 2) == []
    assert "needs exactly 2 classes, this model has 3" in resolve(binary, "categorical", 3)[0]
    assert resolve(binary, "multilabel", 3) == []  # NNx's multilabel F1: the decisions pooled over every label
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(n, 4, generator=g) * 2, (torch.rand(n, 4, generator=g) < 0.4).float()) for n in SIZES]
    got = accumulate(batches, TaskAdapter("multilabel", "binary_cross_entropy"), 4, binary)
    y = torch.cat([b[1] for b in batches]).long().numpy()
    pred = (torch.sigmoid(torch.cat([b[0] for b in batches])) >= 0.5).long().numpy()
    assert got["metrics"]["f1"] == pytest.approx(skm.f1_score(y.ravel(), pred.ravel(), average="binary"), **TOL)
    assert "takes no config" in resolve((nnx.MetricSpec(id="nll", config={"eps": 1}),), "categorical")[0]


def test_binary_f1_on_more_than_two_classes_is_refused_before_any_run(tmp_path):
    import torch

    import nnx_api as nnx

    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3))
    params = nnx.NNTrainParams(
        n_epochs=1, train_loader=[(torch.randn(4, 4), torch.tensor([0, 1, 2, 0]))],
        metrics=[nnx.MetricSpec(id="f1", config={"average": "binary"})],
    )
    with pytest.raises(nnx.ParamsError, match="needs exactly 2 classes, this model has 3"):
        model.train(params, root=tmp_path / "runs")
    assert not (tmp_path / "runs").exists() or not any(p for p in (tmp_path / "runs").iterdir() if not p.name.startswith("."))
