"""The rest of NNx 0.4's surface, written from its documentation: ``precision_support()``
(REFERENCE §8.5), ``streaming_eval_step`` (§4.2) and registered optimizer factories —
``NNOptimFactoryParams``, ``OptimizerFactorySpec``, ``register_optimizer_factory`` (§2.3, §2.6,
§9.1: the spec enters the run id through its state; a ``factory`` entry is the decode
discriminator; factory(param_groups, read-only config) must return an optimizer holding exactly
the given parameters)."""

from __future__ import annotations

import doctest
import types

import attrs
import pytest
import torch

import nnx_api as nnx
import nnx_api.optimizers
import nnx_api.precision
import nnx_api.streaming
from nnx_api.nn.nn_model import streaming_eval_step as nn_model_streaming_eval_step

from tests.api.tiny import batches, tiny_data, two_part_model

MODES = ("fp32", "fp16", "bf16")


# ------------------------------------------------------------------------------ precision_support
def test_precision_support_reports_cpu_fp32_and_bf16_verified():
    """§8.5: ``precision_support()`` reports verified only for CPU fp32 and CPU bf16; fp16 needs
    CUDA, so it is not something the CPU can run."""
    assert nnx.precision_support("cpu") == {"cpu": {"fp32": "verified", "fp16": "unsupported", "bf16": "verified"}}
    assert nnx.precision_support(torch.device("cpu")) == nnx.precision_support("cpu")
    assert nnx.precision.precision_support is nnx.precision_support


def test_precision_support_matrix_covers_every_device_type_and_claims_nothing_absent():
    matrix = nnx.precision_support()
    assert set(matrix) == {"cpu", "cuda", "mps"}
    assert all(set(row) == set(MODES) for row in matrix.values())
    verified = {(device, mode) for device, row in matrix.items() for mode, status in row.items() if status == "verified"}
    assert verified == {("cpu", "fp32"), ("cpu", "bf16")}
    # MPS runs no reduced mode here (fp16 needs CUDA's GradScaler, bf16 is refused on MPS)
    assert matrix["mps"]["fp16"] == matrix["mps"]["bf16"] == "unsupported"
    mps = torch.backends.mps.is_available()
    assert matrix["mps"]["fp32"] == ("supported" if mps else "unverified")
    if not torch.cuda.is_available():  # no hardware: nothing is claimed either way
        assert matrix["cuda"] == {mode: "unverified" for mode in MODES}
    else:
        assert matrix["cuda"]["fp32"] == matrix["cuda"]["fp16"] == "supported"
        native_bf16 = torch.cuda.get_device_capability()[0] >= 8
        assert matrix["cuda"]["bf16"] == ("supported" if native_bf16 else "unsupported")


def test_precision_support_agrees_with_what_a_policy_resolves_to():
    """A mode the matrix marks runnable on the CPU resolves; one it marks unsupported is refused
    (or falls back to fp32 when the policy says so)."""
    row = nnx.precision_support("cpu")["cpu"]
    for mode, status in row.items():
        params = nnx.NNModelParams(precision=nnx.PrecisionPolicy(mode))
        if status == "unsupported":
            with pytest.raises(nnx.PrecisionUnsupportedError):
                nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), params)
            fallback = nnx.NNModelParams(precision=nnx.PrecisionPolicy(mode, fallback="fp32"))
            assert nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), fallback).resolved_precision.effective == "fp32"
        else:
            assert nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), params).resolved_precision.effective == mode


# ------------------------------------------------------------------------------ streaming_eval_step
def _model(seed=0):
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


def _params(**kw):
    x, y = tiny_data(n=40)
    kw.setdefault("train_loader", batches(x, y, 8))
    kw.setdefault("val_loader", batches(x[:30], y[:30], 7))  # uneven batches: the loss is Σ numerators / Σ counts
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0)
    return nnx.NNTrainParams(n_epochs=2, optim=optim, **kw)


def test_streaming_eval_step_gives_the_default_validation_record(runs):
    """§4.2: a bounded built-in alternative to an ``eval_step_fn``: its record is the one the
    default validation (``evaluate``) gives — loss, error, accuracy, F1 / precision / recall,
    count and the declared metrics."""
    metrics = (nnx.MetricSpec("nll"), nnx.MetricSpec("f1"))
    default = _model().train(_params(metrics=metrics), root=runs / "default")
    streamed = _model().train(_params(metrics=metrics), eval_step_fn=nnx.streaming_eval_step, root=runs / "streamed")
    for a, b in zip(default.epochs.values(), streamed.epochs.values(), strict=True):
        va, vb = a.val_edp, b.val_edp
        assert vb.count == va.count == 30
        assert (vb.accuracy, vb.f1, vb.precision, vb.recall) == pytest.approx((va.accuracy, va.f1, va.precision, va.recall))
        assert vb.loss == pytest.approx(va.loss, rel=1e-6)
        assert vb.error == pytest.approx(va.error)
        assert set(vb.metrics) == set(va.metrics) == {"nll", "f1"}
        assert vb.metrics["nll"] == pytest.approx(va.metrics["nll"], rel=1e-6)
    assert nnx.streaming.streaming_eval_step is nnx.streaming_eval_step is nn_model_streaming_eval_step


def test_streaming_eval_step_record_equals_evaluate(runs):
    seen = []

    def wrapped(ctx):
        record = nnx.streaming_eval_step(ctx)
        seen.append((record, ctx.model.evaluate(ctx.val_loader, metrics=ctx.metrics)))
        return record

    _model().train(_params(metrics=(nnx.MetricSpec("brier"),)), eval_step_fn=wrapped, root=runs)
    assert len(seen) == 2
    for streamed, evaluated in seen:
        # standalone evaluate() leaves count None without a TaskSpec, as NNx's evaluate() does;
        # the in-fit validation record keeps the valid-target count (30 rows)
        assert evaluated.count is None and streamed.count == 30
        assert streamed == attrs.evolve(evaluated, count=streamed.count)


def test_streaming_eval_step_does_not_call_an_evaluate_override(runs):
    """NNx: a model subclass overriding ``evaluate()`` keeps it only on the default validation step."""

    class Overriding(nnx.NNModel):
        def evaluate(self, *args, **kwargs):
            raise AssertionError("streaming_eval_step called the override")

    torch.manual_seed(0)
    model = Overriding(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    run = model.train(_params(), eval_step_fn=nnx.streaming_eval_step, root=runs)
    assert run.epochs[1].val_edp.count == 30


def test_streaming_eval_step_refuses_extra_metrics_before_anything_is_written(runs):
    """Functions of the full arrays cannot be computed from counts and sums: refused when
    training starts, before a run is reserved."""
    x, y = tiny_data(n=16)
    iterated = []

    class Loader:
        def __iter__(self):
            iterated.append(True)
            return iter(batches(x, y, 8))

    params = _params(extra_metrics={"first": lambda y_true, y_pred: float(y_true[0])}, train_loader=Loader())
    iterated.clear()  # constructing the params tells a re-iterable from a one-shot iterator
    with pytest.raises(nnx.ParamsError, match="extra_metrics"):
        _model().train(params, eval_step_fn=nnx.streaming_eval_step, root=runs)
    assert iterated == []  # refused before the data was read, let alone trained on
    assert not runs.exists() or not [p for p in runs.iterdir() if not p.name.startswith(".")]
    with pytest.raises(ValueError):  # NNx code catching ValueError keeps working
        _model().train(params, eval_step_fn=nnx.streaming_eval_step, root=runs)


# ------------------------------------------------------------------------------ optimizer factories
@pytest.fixture
def factory_calls():
    """Registers ``test.sgd`` v1 (plain SGD from its config) for one test and records its calls."""
    calls = []

    def sgd(param_groups, config):
        calls.append((param_groups, config))
        return torch.optim.SGD(param_groups, momentum=config["momentum"])

    nnx.register_optimizer_factory("test.sgd", 1, sgd)
    yield calls
    nnx.unregister_optimizer_factory("test.sgd", 1)


def _factory_optim(**kw):
    spec = nnx.OptimizerFactorySpec("test.sgd", 1, {"momentum": 0.0})
    return nnx.NNOptimFactoryParams(factory=spec, max_lr=0.1, **kw)


def _fit(optim, root, model=None):
    x, y = tiny_data(n=24)
    model = model or _model()
    run = model.train(nnx.NNTrainParams(n_epochs=2, optim=optim, train_loader=batches(x, y, 8)), root=root)
    return model, run


def test_factory_optimizer_trains_like_the_builtin_it_builds(runs, factory_calls):
    """The registered factory builds the run's optimizer; plain SGD through a factory updates the
    weights exactly as ``NNOptimParams(SGD)`` does."""
    builtin, _ = _fit(nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0), runs / "builtin")
    registered, run = _fit(_factory_optim(), runs / "factory")
    assert len(factory_calls) == 1
    for a, b in zip(builtin.net.state_dict().values(), registered.net.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)
    groups, config = factory_calls[0]
    assert [(g["lr"], g["weight_decay"]) for g in groups] == [(0.1, 0.0)]
    assert isinstance(config, types.MappingProxyType) and dict(config) == {"momentum": 0.0}
    with pytest.raises(TypeError):
        config["momentum"] = 0.9  # read-only
    assert run.checkpoint("last") is not None


def test_factory_spec_is_in_the_run_id_and_reloads_without_the_factory(runs, factory_calls):
    """§9.1/§2.3: ``state()`` carries a ``factory`` entry (the decode discriminator); the run
    reloads offline — no factory registered, no factory code run."""
    optim = _factory_optim(grad_clip_norm=1.0)
    state = nnx.NNTrainParams(n_epochs=2, optim=optim).state()
    assert state["optim"]["factory"] == {"id": "test.sgd", "version": 1, "config": {"momentum": 0.0}}
    assert "name" not in state["optim"] and state["optim"]["grad_clip_norm"] == 1.0
    assert nnx.NNTrainParams.from_state(state).optim == optim
    other = nnx.NNOptimFactoryParams(factory=nnx.OptimizerFactorySpec("test.sgd", 1, {"momentum": 0.5}), max_lr=0.1)
    _, run = _fit(optim, runs)
    nnx.unregister_optimizer_factory("test.sgd", 1)
    loaded = nnx.NNRun.load(run.id, runs)
    assert loaded.train.optim == optim and isinstance(loaded.train.optim, nnx.NNOptimFactoryParams)
    assert nnx.NNTrainParams(n_epochs=2, optim=other).state() != state  # the config is part of the identity
    trainer = nnx.NNTrainerParams(n_epochs=1, optims={"main": optim})
    assert nnx.NNTrainerParams.from_state(trainer.state()) == trainer


def test_a_bad_saved_factory_state_names_its_path():
    with pytest.raises(nnx.ParamsError, match=r"OptimizerFactorySpec\.version") as caught:
        nnx.NNTrainParams.from_state({"n_epochs": 1, "optim": {"factory": {"id": "x", "version": 0}, "max_lr": 0.1}})
    assert caught.value.path.startswith("NNTrainParams.optim")


def test_a_stateful_resume_needs_the_same_factory_identity(runs, factory_calls):
    """NNx: warm resume requires the same factory id / version / config as the checkpoint."""
    x, y = tiny_data(n=24)
    _, source = _fit(_factory_optim(), runs)
    changed = nnx.NNOptimFactoryParams(factory=nnx.OptimizerFactorySpec("test.sgd", 1, {"momentum": 0.5}), max_lr=0.1)

    def resume(optim):
        params = nnx.NNTrainParams(n_epochs=1, optim=optim, train_loader=batches(x, y, 8),
                                   resume_from_run_id=source.id, resume_mode="stateful")
        return _model().train(params, root=runs)

    with pytest.raises(nnx.NNxError, match="factory"):
        resume(changed)
    resumed = resume(_factory_optim())
    assert resumed.resume_status.mode == "stateful" and resumed.id != source.id


def test_an_unregistered_factory_is_refused_before_anything_is_written(runs):
    spec = nnx.OptimizerFactorySpec("test.nowhere", 3, {})
    with pytest.raises(nnx.MissingOptimizerFactoryError, match="register_optimizer_factory") as caught:
        _fit(nnx.NNOptimFactoryParams(factory=spec, max_lr=0.1), runs)
    assert isinstance(caught.value, ValueError)  # NNx raises ValueError here
    assert not runs.exists() or not [p for p in runs.iterdir() if not p.name.startswith(".")]


def test_a_factory_must_return_an_optimizer_over_exactly_the_given_parameters(runs):
    extra = torch.nn.Parameter(torch.zeros(3))
    nnx.register_optimizer_factory("test.foreign", 1, lambda groups, config: torch.optim.SGD([*groups, {"params": [extra]}]))
    nnx.register_optimizer_factory("test.partial", 1, lambda groups, config: torch.optim.SGD(groups[0]["params"][:1], lr=0.1))
    nnx.register_optimizer_factory("test.notone", 1, lambda groups, config: object())
    try:
        for name in ("test.foreign", "test.partial", "test.notone"):
            optim = nnx.NNOptimFactoryParams(factory=nnx.OptimizerFactorySpec(name, 1), max_lr=0.1)
            with pytest.raises(nnx.ParamsError, match=name):
                _fit(optim, runs)
    finally:
        for name in ("test.foreign", "test.partial", "test.notone"):
            nnx.unregister_optimizer_factory(name, 1)


def test_factory_groups_follow_param_group_specs(factory_calls):
    """The factory gets the groups a built-in optimizer would: a matching spec's own lr, the rest
    in a default group with ``max_lr`` / ``weight_decay``; ``build_optimizer`` is the one hook."""
    model = two_part_model()
    optim = _factory_optim(weight_decay=0.01, param_groups=[nnx.NNParamGroupSpec("encoder.*", lr=0.01)])
    built = nnx.build_optimizer(model.net, optim)
    assert isinstance(built, torch.optim.SGD)
    groups, _ = factory_calls[0]
    assert [(g["lr"], g["weight_decay"], len(g["params"])) for g in groups] == [(0.01, 0.01, 2), (0.1, 0.01, 2)]
    assert nnx.optimizers.build_optimizer is nnx.build_optimizer


def test_register_optimizer_factory_rules(factory_calls):
    with pytest.raises(nnx.ParamsError, match="already registered"):
        nnx.register_optimizer_factory("test.sgd", 1, lambda groups, config: None)
    nnx.register_optimizer_factory("test.sgd", 1, lambda groups, config: torch.optim.SGD(groups), replace=True)
    assert ("test.sgd", 1) in nnx.registered_optimizer_factories()
    with pytest.raises(nnx.ParamsError):
        nnx.register_optimizer_factory("test.other", 1, "not callable")
    with pytest.raises(nnx.ParamsError):
        nnx.NNOptimFactoryParams(factory=lambda groups, config: None, max_lr=0.1)  # a callable is not a spec
    with pytest.raises(nnx.ParamsError):
        nnx.OptimizerFactorySpec("test.sgd", 1, {"fn": print})  # config is JSON-like only
    assert _factory_optim().is_valid()


def test_module_examples_run():
    """The docstring examples of ``nnx.optimizers`` and ``nnx.precision`` run as written."""
    for module in (nnx_api.optimizers, nnx_api.precision):
        outcome = doctest.testmod(module)
        assert outcome.attempted > 0 and outcome.failed == 0, module.__name__
