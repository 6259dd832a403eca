"""NNx's model and inference surface (REFERENCE §1.5, §3.1, §3.2, §3.6).

freeze / unfreeze / frozen, load_pretrained, export_state_dict; ``predict(X=...)``,
``predict_proba(X, ProbabilitySpec(...))``, ``iter_predict`` streams; batch adapters; registered
model factories (``ModelSpec``). Every inference utility is non-destructive: it runs in eval
mode and restores each submodule's own train/eval flag.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx
from nnx_api.finetune import LoadPretrainedResult
from nnx_api.prediction import PredictionValidationError, ProbabilitySpec, prediction_from_logits
from nnx_api.streaming import PredictionBatch, StreamClosedError


def mlp(seed=0, **shape):
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(6,), dropout_prob=0.5, **shape))


def flags(net):
    return [m.training for m in net.modules()]


# ------------------------------------------------------------------------------ fine-tuning
def test_freeze_unfreeze_count_changes_and_frozen_lists_names():
    model = mlp()
    assert model.freeze("layers.0.*") == 2
    assert model.freeze("layers.0.*") == 0  # already frozen
    assert model.frozen() == ["layers.0.bias", "layers.0.weight"]
    assert nnx.frozen(model.net) == model.frozen()
    assert model.unfreeze("*.bias") == 1 and model.frozen() == ["layers.0.weight"]
    with pytest.raises(nnx.ParamsError, match="pattern"):
        model.freeze()


def test_export_state_dict_then_load_pretrained(tmp_path):
    source, target = mlp(1), mlp(2)
    path = source.export_state_dict(tmp_path / "weights.pt")
    plain = torch.load(path, weights_only=True)  # a plain state dict any torch consumer reads
    assert set(plain) == set(source.net.state_dict())
    result = target.load_pretrained(path)
    assert isinstance(result, LoadPretrainedResult) and result.missing_keys == result.unexpected_keys == []
    assert all(torch.equal(target.net.state_dict()[k], v) for k, v in plain.items())

    prefixed = {f"backbone.{k}": v for k, v in plain.items() if k.startswith("layers.0.")} | {"extra.w": torch.zeros(1)}
    fresh = mlp(3)
    part = nnx.load_pretrained(fresh.net, prefixed, key_map={"backbone.": ""})
    assert part.loaded_keys == ["layers.0.bias", "layers.0.weight"] and part.unexpected_keys == ["extra.w"]
    assert part.missing_keys == ["layers.1.bias", "layers.1.weight"]
    stripped = nnx.load_pretrained(mlp(4).net, {f"model.{k}": v for k, v in plain.items()}, prefix="model.")
    assert stripped.missing_keys == []
    with pytest.raises(nnx.ResumeMismatchError, match="strict"):
        nnx.load_pretrained(mlp(5).net, prefixed, key_map={"backbone.": ""}, strict=True)


# -------------------------------------------------------------------------------- prediction
def test_predict_takes_x_by_keyword_and_unpacks_as_a_pair():
    model, x = mlp(), torch.randn(5, 4)
    logits, classes = model.predict(X=x.numpy())
    assert np.array_equal(classes, logits.argmax(-1)) and np.array_equal(model.predict(x).logits, logits)


def test_predict_returns_numpy_arrays_as_nnx_does():
    """NNx 0.4.1 returns NumPy arrays: float32 logits and int64 classes, from a tensor or an array."""
    model, x = mlp(), torch.randn(5, 4)
    for given in (x, x.numpy(), [(x[:2], None), (x[2:], None)]):
        result = model.predict(given)
        assert type(result).__name__ == "PredictResult" and len(result) == 2
        assert isinstance(result.logits, np.ndarray) and result.logits.dtype == np.float32
        assert result.logits.shape == (5, 3)
        assert isinstance(result.classes, np.ndarray) and result.classes.dtype == np.int64
        assert result.classes.shape == (5,)
    with torch.no_grad():
        model.net.eval()
        expected = model.net(x).numpy()
    np.testing.assert_allclose(model.predict(x).logits, expected, rtol=1e-6)
    assert torch.from_numpy(model.predict(x).logits).dtype == torch.float32  # explicit conversion back


def test_predict_proba_with_a_categorical_spec():
    model, x = mlp(), torch.randn(7, 4)
    spec = ProbabilitySpec(kind="categorical", class_axis=1, labels=("a", "b", "c"))
    result = model.predict_proba(x.numpy(), spec)
    np.testing.assert_allclose(result.probabilities.sum(axis=1), np.ones(7), rtol=1e-6)
    assert (result.logits.dtype, result.probabilities.dtype, result.decoded.dtype, result.sample_ids.dtype) == (
        np.float32, np.float32, np.int64, np.int64)
    assert np.array_equal(result.logits, model.predict(x).logits) and np.array_equal(result.decoded, result.logits.argmax(1))
    assert result.sample_ids.tolist() == list(range(7)) and result.spec == spec and result.kind == "categorical"
    assert result.decoded_labels().tolist() == [spec.labels[i] for i in result.decoded.tolist()]
    batched = model.predict_proba(DataLoader(TensorDataset(x), batch_size=3), spec)
    assert np.array_equal(batched.decoded, result.decoded) and np.array_equal(batched.sample_ids, result.sample_ids)


def test_predict_proba_without_a_spec_needs_a_task_spec():
    """REFERENCE §3.6: the spec is never inferred; without one the TaskSpec supplies it, and
    without a TaskSpec NNx raises TypeError (ours: ParamsError, a TypeError)."""
    model, x = mlp(), torch.randn(4, 4)
    with pytest.raises(TypeError, match=r"spec=ProbabilitySpec\(") as caught:
        model.predict_proba(x)
    assert isinstance(caught.value, nnx.ParamsError) and "TaskSpec" in str(caught.value)
    with pytest.raises(TypeError, match="TaskSpec"):
        model.iter_predict([(x, None)], rich=True)
    torch.manual_seed(0)
    tasked = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(6,)),
                         nnx.NNModelParams(task=nnx.TaskSpec.categorical()))
    result = tasked.predict_proba(x)
    assert result.spec == ProbabilitySpec("categorical", 1) and result.kind == "categorical"  # the task's spec, as NNx
    assert result.probabilities.dtype == np.float32
    assert result.decoded.dtype == np.int64 and np.array_equal(result.decoded, tasked.predict(x).classes)
    rich = list(tasked.iter_predict([(x[:3], None), (x[3:], None)], rich=True))
    assert np.array_equal(np.concatenate([r.probabilities for r in rich]), result.probabilities)


def test_regression_predict_proba_has_no_probabilities_and_float_values():
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=2, hidden_dims=(6,)),
                        nnx.NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR, task=nnx.TaskSpec.regression(2)))
    x = torch.randn(8, 4)
    result = model.predict_proba(x)
    assert result.probabilities is None and result.kind == "continuous"
    assert isinstance(result.decoded, np.ndarray) and result.decoded.dtype == np.float32 and result.decoded.shape == (8, 2)
    assert np.array_equal(result.decoded, model.predict(x).classes)


def test_an_empty_input_to_predict_is_both_a_value_and_a_runtime_error():
    """NNx 0.4.1 raises RuntimeError; REFERENCE documents ValueError: ours is both."""
    model = mlp()
    for call in (lambda: model.predict([]), lambda: model.predict_proba([], ProbabilitySpec("categorical"))):
        with pytest.raises(nnx.PredictionInputError, match="empty") as caught:
            call()
        assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, ValueError)


def test_a_task_width_other_than_output_dim_is_refused_at_construction():
    """NNx raises TaskValidationError (a ValueError) when the TaskSpec's width is not output_dim."""
    params = nnx.NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR, task=nnx.TaskSpec.regression(2))
    with pytest.raises(nnx.TaskValidationError, match="output_dim") as caught:
        nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), params)
    assert isinstance(caught.value, ValueError)
    assert nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=2, hidden_dims=(8,)), params).head.width == 2
    unsized = nnx.NNModelParams(loss=nnx.Losses.MEAN_SQUARED_ERROR, task=nnx.TaskSpec.regression())
    assert nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), unsized).head.width == 3


def test_bernoulli_predictions_are_indicators_not_classes():
    logits = torch.tensor([[-1.0, 0.0, 2.0], [3.0, -2.0, 0.5]])
    result = prediction_from_logits(logits, ProbabilitySpec("bernoulli"))
    np.testing.assert_allclose(result.probabilities, torch.sigmoid(logits).numpy(), rtol=1e-6)
    assert result.decoded.dtype == np.int64 and result.decoded.tolist() == [[0, 1, 1], [1, 0, 1]]
    with pytest.raises(TypeError, match="categorical"):
        result.class_indices


@pytest.mark.parametrize(
    "spec, logits, reason",
    [
        (ProbabilitySpec("categorical", labels=("a", "b")), torch.zeros(2, 3), "labels"),
        (ProbabilitySpec("categorical", class_axis=0), torch.zeros(2, 3), "sample axis"),
        (ProbabilitySpec("categorical", class_axis=2), torch.zeros(2, 3), "out of range"),
        (ProbabilitySpec("categorical"), torch.zeros(2, 1), "2 classes"),
        (ProbabilitySpec("categorical"), torch.tensor([[0.0, float("nan")]]), "non-finite"),
        (ProbabilitySpec("categorical"), torch.zeros(3), "2-D"),
    ],
)
def test_a_spec_that_does_not_fit_is_refused(spec, logits, reason):
    with pytest.raises(PredictionValidationError, match=reason):
        prediction_from_logits(logits, spec)


@pytest.mark.parametrize("bad", [dict(kind="poisson"), dict(kind="categorical", labels=("a", "a")),
                                 dict(kind="categorical", labels=("a",)), dict(kind="bernoulli", class_axis=1.0)])
def test_an_invalid_spec_is_refused_at_construction(bad):
    with pytest.raises(PredictionValidationError):
        ProbabilitySpec(**bad)
    assert ProbabilitySpec.from_state(ProbabilitySpec("bernoulli", 1, ["x"]).state()) == ProbabilitySpec("bernoulli", 1, ("x",))


def test_iter_predict_streams_what_the_eager_calls_return():
    model = mlp()
    x = torch.randn(10, 4)
    loader = DataLoader(TensorDataset(x, torch.zeros(10, dtype=torch.long)), batch_size=4)
    with model.iter_predict(loader) as stream:
        parts = list(stream)
    assert [type(p) for p in parts] == [PredictionBatch] * 3 and [len(p) for p in parts] == [4, 4, 2]
    assert all(isinstance(p.logits, np.ndarray) and p.classes.dtype == p.sample_ids.dtype == np.int64 for p in parts)
    assert np.array_equal(np.concatenate([p.logits for p in parts]), model.predict(loader).logits)
    assert np.concatenate([p.sample_ids for p in parts]).tolist() == list(range(10))
    assert np.array_equal(nnx.streaming.concatenate_predictions(parts).classes, model.predict(loader).classes)
    spec = ProbabilitySpec("categorical")
    rich = list(model.iter_predict(loader, spec))
    np.testing.assert_allclose(np.concatenate([r.probabilities for r in rich]),
                               model.predict_proba(loader, spec).probabilities, rtol=1e-6)
    merged = nnx.streaming.concatenate_predictions(rich)
    assert np.array_equal(merged.sample_ids, np.arange(10)) and merged.decoded.dtype == np.int64
    with pytest.raises(StopIteration):  # a consumed stream is exhausted, as a closed generator is
        next(stream)
    with pytest.raises(StreamClosedError, match="consumed"):
        iter(stream)
    opened = model.iter_predict(loader)
    opened.close()
    with pytest.raises(StreamClosedError):
        iter(opened)
    assert list(model.iter_predict([])) == []
    with pytest.raises(nnx.TrainingInputError):
        model.iter_predict(x)


def test_inference_is_non_destructive():
    model = mlp()
    model.net.train()
    model.net.layers[1].eval()  # mixed per-module flags
    before = flags(model.net)
    x = torch.randn(6, 4)
    loader = [(x[:3], None), (x[3:], None)]
    first = model.predict(x).logits
    assert flags(model.net) == before
    model.predict_proba(x, ProbabilitySpec("categorical"))
    assert flags(model.net) == before
    for _ in model.iter_predict(loader):
        assert flags(model.net) == before  # restored before each batch is handed out
    model.evaluate([(x, torch.zeros(6, dtype=torch.long))])
    assert flags(model.net) == before
    assert np.array_equal(model.predict(x).logits, first)  # eval mode: dropout off, every time


def test_shuffling_loaders_warn_that_ids_are_positions():
    model = mlp()
    loader = DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2, shuffle=True)
    with pytest.warns(UserWarning, match="iteration positions") as record:
        model.predict_proba(loader, ProbabilitySpec("categorical"))
    assert [w.filename for w in record] == [__file__]  # the user's line, not ours


# ---------------------------------------------------------------------------- batch adapters
class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(2, 3), nn.Linear(2, 3)

    def forward(self, left, right):
        return self.a(left) + self.b(right)


def test_positional_and_keyword_batch_adapters():
    torch.manual_seed(0)
    module = TwoInputs()
    left, right = torch.randn(5, 2), torch.randn(5, 2)
    expected = module(left, right)
    positional = nnx.NNModel(params=nnx.NNModelParams(), module=module, batch_adapter=nnx.PositionalInputs(2))
    expected = expected.detach().numpy()
    np.testing.assert_allclose(positional.predict([(left, right, torch.zeros(5))]).logits, expected, rtol=1e-6)
    np.testing.assert_allclose(positional.predict((left, right)).logits, expected, rtol=1e-6)
    keyword = nnx.NNModel(params=nnx.NNModelParams(), module=module,
                          batch_adapter=nnx.KeywordInputs(["left", "right"], target="y"))
    np.testing.assert_allclose(keyword.predict([{"left": left, "right": right, "y": None}]).logits, expected, rtol=1e-6)
    np.testing.assert_allclose(keyword.predict({"left": left, "right": right}).logits, expected, rtol=1e-6)
    assert nnx.PositionalInputs(2).split((1, 2)) == ((1, 2), {}, None)
    with pytest.raises(nnx.TrainingInputError, match="keys"):
        keyword.predict([{"left": left}])
    with pytest.raises(nnx.ParamsError):
        nnx.NNModel(params=nnx.NNModelParams(), module=module, batch_adapter="positional")
    with pytest.raises(nnx.ParamsError):
        nnx.PositionalInputs(0)


def _two_input_run(runs, batch_adapter, loader, val_loader):
    torch.manual_seed(0)
    model = nnx.NNModel(params=nnx.NNModelParams(), module=TwoInputs(), batch_adapter=batch_adapter)
    params = nnx.NNTrainParams(n_epochs=2, train_loader=loader, val_loader=val_loader, progress=False)
    return model, model.train(params, root=runs, salt=repr(batch_adapter))


def test_batch_adapters_feed_the_default_step_and_validation(runs):
    """REFERENCE §3.1: a batch adapter says how a batch reaches the net — in training too. The same
    batches given as ``((left, right), y)`` pairs, without an adapter, are the oracle."""
    g = torch.Generator().manual_seed(1)
    left, right, y = torch.randn(12, 2, generator=g), torch.randn(12, 2, generator=g), torch.randint(0, 3, (12,), generator=g)
    rows = [slice(0, 6), slice(6, 12)]
    pairs = [((left[r], right[r]), y[r]) for r in rows]
    plain, plain_run = _two_input_run(runs, None, pairs, pairs)
    dicts = [{"left": left[r], "right": right[r], "labels": y[r]} for r in rows]
    keyword, keyword_run = _two_input_run(runs, nnx.KeywordInputs(["left", "right"]), dicts, dicts)
    triples = [(left[r], right[r], y[r]) for r in rows]
    positional, positional_run = _two_input_run(runs, nnx.PositionalInputs(2), triples, triples)
    for model, run in ((keyword, keyword_run), (positional, positional_run)):
        assert all(torch.equal(a, b) for a, b in zip(model.net.state_dict().values(), plain.net.state_dict().values(), strict=True))
        assert run.idps[-1].val_edp == plain_run.idps[-1].val_edp
        assert [i.train_edp for i in run.idps] == [i.train_edp for i in plain_run.idps]
    assert keyword.evaluate(dicts) == plain.evaluate(pairs)
    with pytest.raises(nnx.TaskValidationError):  # a training batch needs its target
        keyword.evaluate([{"left": left, "right": right}])


# ------------------------------------------------------------------------ registered factories
@pytest.fixture
def factory():
    def build(config):
        return nn.Sequential(nn.Linear(4, config["width"]), nn.ReLU(), nn.Linear(config["width"], 3))

    nnx.register_model_factory("compat-mlp", 1, build)
    yield build
    nnx.unregister_model_factory("compat-mlp", 1)
    nnx.unregister_model_factory("compat-mlp", 2)


def test_a_model_spec_builds_the_same_weights_and_leaves_the_rng_alone(factory):
    spec = nnx.ModelSpec("compat-mlp", 1, {"width": 5}, seed=3)
    torch.manual_seed(11)
    random.seed(11)
    np.random.seed(11)
    expected_draws = (torch.rand(1), random.random(), np.random.rand())
    torch.manual_seed(11)
    random.seed(11)
    np.random.seed(11)
    a = nnx.NNModel(params=nnx.NNModelParams(net=spec))
    assert (torch.rand(1), random.random(), np.random.rand()) == expected_draws  # streams restored
    b = nnx.NNModel(params=nnx.NNModelParams(net=spec))
    assert all(torch.equal(a.net.state_dict()[k], v) for k, v in b.net.state_dict().items())
    with torch.random.fork_rng():
        torch.manual_seed(3)
        oracle = factory({"width": 5})
    assert all(torch.equal(a.net.state_dict()[k], v) for k, v in oracle.state_dict().items())
    assert ("compat-mlp", 1) in nnx.registered_model_factories()
    with pytest.raises(nnx.ParamsError, match="already registered"):
        nnx.register_model_factory("compat-mlp", 1, factory)


def test_a_registered_net_trains_and_reloads_through_its_factory(factory, runs):
    spec = nnx.ModelSpec("compat-mlp", 1, {"width": 5})
    model = nnx.NNModel(params=nnx.NNModelParams(net=spec))
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    run = model.train(nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)], progress=False), root=runs)
    assert run.config["model"]["net"] == spec.state() and "module" not in run.config
    ckpt = nnx.NNCheckpoint.load(run.id, "last", runs)
    assert ckpt.reconstructible  # its factory rebuilds it, as NNx reports
    again = nnx.NNModel.from_checkpoint(ckpt)
    assert np.array_equal(again.predict(x).logits, model.predict(x).logits)
    nnx.register_model_factory("compat-mlp", 1, lambda c: nn.Linear(4, 3), replace=True)
    with pytest.raises(nnx.ResumeMismatchError, match=r"do not fit.*\(missing: bias, weight; unexpected: 0.bias, "
                       r"0.weight, 2.bias, 2.weight\)"):
        nnx.NNModel.from_checkpoint(ckpt)
    # the same layers, twice as wide: every tensor but the last bias (3 outputs either way) changes shape
    nnx.register_model_factory("compat-mlp", 1, lambda c: factory({"width": 2 * c["width"]}), replace=True)
    with pytest.raises(nnx.ResumeMismatchError,
                       match=r"topology does not match the saved weights \(reshaped: 0.bias, 0.weight, 2.weight\)"):
        nnx.NNModel.from_checkpoint(ckpt)
    nnx.unregister_model_factory("compat-mlp", 1)
    with pytest.raises(nnx.MissingModelFactoryError, match="register_model_factory"):
        nnx.NNModel.from_checkpoint(ckpt)


def test_to_onnx_takes_nnx_opset_version(tmp_path):
    """REFERENCE §3.2: ``to_onnx(path, example_input, ..., opset_version=17, dynamo=False)``."""
    import onnx

    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=2, hidden_dims=(8,)), nnx.NNModelParams())
    path = model.to_onnx(tmp_path / "ffn.onnx", torch.randn(1, 4), opset_version=13, input_names=["x"])
    graph = onnx.load(str(path))
    assert {o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")} == {13}
    assert [i.name for i in graph.graph.input] == ["x"]
    with pytest.raises(nnx.ParamsError):
        model.to_onnx(tmp_path / "x.onnx", torch.randn(1, 4), opset_version=13, opset=17)


def test_a_batch_the_task_refuses_is_a_task_validation_error():
    """REFERENCE §8.3: the adapter validates every batch (``TaskValidationError``, a ValueError)."""
    from nnx_api.tasks import TaskValidationError

    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams(task=nnx.TaskSpec.categorical(3)))
    with pytest.raises(TaskValidationError, match="integer class targets"):
        model.evaluate([(torch.randn(5, 4), torch.rand(5))])
    assert TaskValidationError is nnx.TaskValidationError and issubclass(TaskValidationError, ValueError)
    assert issubclass(TaskValidationError, nnx.TrainingInputError)  # code catching the general error still works
