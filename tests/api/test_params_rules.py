"""Rules for the parameters a user writes: PyTorch's flags NNx spells elsewhere, torch.optim
optimizers NNx does not build, plateau fields given to a kind that ignores them, MetricSpec /
MonitorSpec in the wrong place, extra metrics named like a built-in, undeclared monitor names,
NNx's own handles (and run folders) where an id or a tag is expected, and train() keywords that
belong in the params. Each is checked at construction (or when train() is called), before
anything is written."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(16, 4, generator=g), torch.arange(16) % 3), batch_size=8)


def model() -> nnx.NNModel:
    nnx.set_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


# -- PyTorch's flags that NNx spells as a kind or on the monitor ---------------------------------------------
@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: nnx.NNOptimParams(name="sgd", momentum=0.9, nesterov=True), "name='sgd_nesterov'"),
        (lambda: nnx.NNOptimParams(name="adam", amsgrad=True), "name='adam_amsgrad'"),
        (lambda: nnx.NNSchedulerParams(mode="max"), "MonitorSpec("),
        (lambda: nnx.NNSchedulerParams(threshold_mode="abs"), "MonitorSpec("),
    ],
    ids=["nesterov", "amsgrad", "mode", "threshold_mode"],
)
def test_a_torch_flag_names_what_nnx_writes_instead(make, said):
    with pytest.raises(nnx.ParamsError, match="PyTorch's flag") as caught:
        make()
    assert said in str(caught.value)


def test_the_spelled_kinds_still_build():
    assert nnx.NNOptimParams(name="sgd_nesterov", momentum=0.9).name is nnx.Optims.SGD_NESTEROV
    assert nnx.NNOptimParams(name="adam_amsgrad").name is nnx.Optims.ADAM_AMSGRAD


# -- a torch.optim optimizer NNx does not build --------------------------------------------------------------
@pytest.mark.parametrize("name", ["rmsprop", "RMSprop", "adadelta", "lbfgs", torch.optim.Adagrad])
def test_a_torch_optimizer_not_built_in_names_the_factory_route(name):
    with pytest.raises(nnx.ParamsError, match="not built in") as caught:
        nnx.NNOptimParams(name=name)
    text = str(caught.value)
    assert "register_optimizer_factory" in text and "NNOptimFactoryParams" in text


def test_an_unknown_optimizer_name_still_lists_the_built_in_ones():
    with pytest.raises(nnx.ParamsError, match="must be one of 'sgd'"):
        nnx.NNOptimParams(name="not_an_optimizer")


def test_the_factory_route_the_message_gives_trains(tmp_path):
    nnx.register_optimizer_factory("adadelta", 1, lambda groups, config: torch.optim.Adadelta(groups, **config))
    try:
        optim = nnx.NNOptimFactoryParams(factory=nnx.OptimizerFactorySpec("adadelta", 1, {}), max_lr=1.0)
        run = model().train(nnx.NNTrainParams(n_epochs=1, optim=optim, train_loader=loader(), progress=False), root=tmp_path)
        assert run.config["train"]["optim"]["factory"]["id"] == "adadelta"
    finally:
        nnx.unregister_optimizer_factory("adadelta", 1)


# -- plateau fields given to a kind that does not read them ---------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "field", "value"),
    [("cosine_annealing", "patience", 5), ("cosine_annealing", "factor", 0.5), ("one_cycle", "min_lr", 0.0),
     ("step", "cooldown", 0), ("linear_warmup_decay", "threshold", 0.1)],
)
def test_a_plateau_field_the_kind_ignores_is_refused(kind, field, value):
    with pytest.raises(nnx.ParamsError, match=f"kind '{kind}' does not read {field}"):
        nnx.NNSchedulerParams(kind=kind, **{field: value})


def test_plateau_fields_the_kind_reads_or_left_at_their_default_are_accepted_and_ids_stay():
    default = nnx.NNSchedulerParams()
    assert nnx.NNSchedulerParams(kind="step", factor=0.5).factor == 0.5  # StepLR's gamma
    assert nnx.NNSchedulerParams(kind="cosine_annealing", min_lr=0.01).min_lr == 0.01  # eta_min
    same = nnx.NNSchedulerParams(kind="cosine_annealing", patience=default.patience)  # the default: harmless
    assert same.state() == {**default.state(), "kind": "cosine_annealing"}
    # NNx required all five on every kind: that form (and so every saved state) stays accepted
    full = nnx.NNSchedulerParams(kind="one_cycle", min_lr=0.0, factor=0.5, patience=0, cooldown=0, threshold=0.0)
    assert nnx.NNSchedulerParams.from_state(full.state()) == full


# -- kind-specific fields: accepted on their own (a factory may read them), refused where a run uses the kind ------
def test_kindless_params_with_a_kind_specific_field_feed_the_factory_of_that_kind():
    sgd = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    sched = nnx.NNSchedulerParams(step_size=2)  # NNx's form: the factory names the kind
    assert nnx.Schedulers.STEP(sgd, sched, 6).step_size == 2
    cosine = nnx.NNSchedulerParams(kind="step", step_size=2, T_max=4)  # the factory's kind wins over params.kind
    assert nnx.Schedulers.COSINE_ANNEALING(sgd, cosine, 6).T_max == 4


def test_a_run_refuses_a_field_its_schedule_kind_does_not_read(tmp_path):
    sched = nnx.NNSchedulerParams(step_size=2)
    with pytest.raises(nnx.ParamsError, match=r"NNTrainParams\.scheduler\.step_size: kind 'reduce_lr_on_plateau' "
                                              r"does not read step_size .* read by step.*NNSchedulerParams\(kind='step'"):
        nnx.NNTrainParams(n_epochs=1, scheduler=sched)
    with pytest.raises(nnx.ParamsError, match=r"NNTrainerParams\.schedulers\['a'\]\.T_max: kind 'step' does not read T_max"):
        nnx.NNTrainerParams(n_epochs=1, optims={"a": nnx.NNOptimParams()},
                            schedulers={"a": nnx.NNSchedulerParams(kind="step", step_size=2, T_max=4)})
    assert not list(tmp_path.iterdir())
    nnx.NNTrainParams(n_epochs=1, scheduler=nnx.NNSchedulerParams(kind="step", step_size=2))  # its own kind: accepted


# -- MetricSpec / MonitorSpec in the wrong place; extra metrics named like a built-in or a declared metric ----------
def test_a_metric_spec_in_extra_metrics_names_metrics():
    with pytest.raises(nnx.ParamsError, match=r"metrics=\(MetricSpec\('f1'\),\)"):
        nnx.NNTrainParams(n_epochs=1, extra_metrics={"f1": nnx.MetricSpec("f1")})
    with pytest.raises(nnx.ParamsError, match="monitor="):
        nnx.NNTrainParams(n_epochs=1, extra_metrics={"best": nnx.MonitorSpec("loss")})


def test_an_extra_metric_named_like_a_built_in_is_warned_about():
    with pytest.warns(UserWarning, match="built-in value's name"):
        nnx.NNTrainParams(n_epochs=1, extra_metrics={"accuracy": lambda y_true, y_pred: 1.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nnx.NNTrainParams(n_epochs=1, extra_metrics={"my_accuracy": lambda y_true, y_pred: 1.0})


def test_an_extra_metric_named_like_a_declared_metric_is_refused():
    with pytest.raises(nnx.ParamsError, match="already a declared metric"):
        nnx.NNTrainParams(n_epochs=1, metrics=(nnx.MetricSpec("nll"),), extra_metrics={"nll": lambda t, p: 1.0})


# -- undeclared monitor names -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"monitor": nnx.MonitorSpec("val_loss")}, "MonitorSpec('loss', split='val')"),
        ({"monitor": nnx.MonitorSpec("train_accuracy", mode="max")}, "MonitorSpec('accuracy', split='train', mode='max')"),
        ({"monitor": nnx.MonitorSpec("hits", mode="max"), "extra_metrics": {"hits": lambda t, p: 1.0}},
         "extra_metrics function"),
        ({"monitor": nnx.MonitorSpec("nonsense", mode="max")}, "nor a registered metric"),
    ],
    ids=["keras-val_loss", "keras-train_accuracy", "extra-metric", "unknown"],
)
def test_an_undeclared_monitor_name_says_which_mix_up_it_is(kw, said):
    with pytest.raises(nnx.ParamsError) as caught:
        nnx.NNTrainParams(n_epochs=1, **kw)
    assert said in str(caught.value)


def test_a_registered_metric_left_undeclared_is_told_to_declare_it():
    with pytest.raises(nnx.ParamsError, match=r"metrics=\(MetricSpec\('nll'\),\)"):
        nnx.NNTrainParams(n_epochs=1, monitor=nnx.MonitorSpec("nll"))


def test_a_classification_score_monitored_in_a_regression_says_it_is_not_computed(tmp_path):
    x = torch.randn(16, 4)
    m = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=4), nnx.NNModelParams(loss="mean_squared_error"))
    data = DataLoader(TensorDataset(x, x), batch_size=8)
    params = nnx.NNTrainParams(n_epochs=1, train_loader=data, val_loader=data, progress=False,
                               monitor=nnx.MonitorSpec("accuracy", mode="max"))
    with pytest.raises(nnx.ParamsError, match="computed for a classification run only") as caught:
        m.train(params, root=tmp_path)
    assert "MetricSpec('accuracy')" not in str(caught.value)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# -- NNx's handles, and run folders, where an id or a tag is expected ------------------------------------------
def test_run_and_checkpoint_handles_and_folders_name_the_string_to_pass(tmp_path):
    run = model().train(nnx.NNTrainParams(n_epochs=1, train_loader=loader(), progress=False), root=tmp_path)
    with pytest.raises(nnx.ParamsError, match=r"resume_from_run_id=run\.id") as caught:
        nnx.NNTrainParams(n_epochs=1, resume_from_run_id=run)
    assert len(str(caught.value)) < 300  # never the whole repr of the run
    with pytest.raises(nnx.ParamsError, match=r"resume_from_checkpoint=checkpoint\.tag \('last'\)"):
        nnx.NNTrainParams(n_epochs=1, resume_from_run_id=run.id, resume_from_checkpoint=run.checkpoint("last"))
    with pytest.raises(nnx.ParamsError, match=f"resume_from_run_id='{run.id}'"):
        nnx.NNTrainParams(n_epochs=1, resume_from_run_id=str(run.path))
    with pytest.raises(nnx.ParamsError, match="not a path"):
        nnx.NNTrainParams(n_epochs=1, resume_from_run_id=run.path)
    assert nnx.NNTrainParams(n_epochs=1, resume_from_run_id=run.id).parent_run_id == run.id


# -- train() keywords that are params fields -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "said"),
    [("train_loader", "put train_loader= in NNTrainParams"), ("train_dataloaders", "put train_loader= in NNTrainParams"),
     ("val_dataloaders", "put val_loader= in NNTrainParams"), ("max_epochs", "put n_epochs= in NNTrainParams")],
)
def test_a_params_field_given_to_train_says_where_it_goes(tmp_path, kw, said):
    with pytest.raises(nnx.ParamsError, match=said):
        model().train(nnx.NNTrainParams(n_epochs=1, progress=False), root=tmp_path, **{kw: loader()})


def test_a_params_field_given_to_trainer_train_says_where_it_goes(tmp_path):
    params = nnx.NNTrainerParams(n_epochs=1, optims={"main": nnx.NNOptimParams()}, progress=False)
    with pytest.raises(nnx.ParamsError, match="put train_loader= in NNTrainerParams"):
        nnx.Trainer(model()).train(params, root=tmp_path, train_loader=loader())
    with pytest.raises(nnx.ParamsError, match="has no argument 'bogus'"):
        nnx.Trainer(model()).train(params, root=tmp_path, bogus=1)
