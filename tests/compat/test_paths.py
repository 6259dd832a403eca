"""NNx's public module paths (REFERENCE §0–§3: the import paths NNx documents and its users write),
after the one mechanical change ``nnx`` → ``nnx_api``.

Each module path must import and expose its names, and each name must be the very object the
top-level ``nnx_api`` exports (one class, re-exported — never a copy). Names outside this
implementation's scope must say so (``OutOfScopeError`` naming the scope), not look like typos.
"""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

import nnx_api as nnx

# module path (NNx's, with nnx → nnx_api) → names it exposes (documented by NNx)
PATHS = {
    "nnx_api.nn.callbacks": ["Callback", "EarlyStopping", "LRMonitor", "ModelCheckpoint", "NNCheckpoint"],
    "nnx_api.nn.nn_model": ["NNModel", "PredictResult", "TrainStepContext", "TrainStepFn", "EvalStepContext",
                            "EvalStepFn", "default_train_step", "NNCheckpoint", "NNRun"],
    "nnx_api.nn.enum.activations": ["Activations"],
    "nnx_api.nn.enum.checkpoints": ["Checkpoints"],
    "nnx_api.nn.enum.devices": ["Devices"],
    "nnx_api.nn.enum.losses": ["Losses"],
    "nnx_api.nn.enum.nets": ["Nets"],
    "nnx_api.nn.enum.optims": ["Optims"],
    "nnx_api.nn.enum.schedulers": ["Schedulers"],
    "nnx_api.nn.params.nn_checkpoint": ["NNCheckpoint", "NNCheckpointTransform"],
    "nnx_api.nn.params.nn_conv_params": ["NNConvParams"],
    "nnx_api.nn.params.nn_evaluation_data_point": ["NNEvaluationDataPoint"],
    "nnx_api.nn.params.nn_iteration_data_point": ["NNIterationDataPoint"],
    "nnx_api.nn.params.nn_model_params": ["NNModelParams"],
    "nnx_api.nn.params.nn_optim_params": ["NNOptimParams"],
    "nnx_api.nn.params.nn_optim_params_builder": ["NNOptimParamsBuilder"],
    "nnx_api.nn.params.nn_params": ["NNParams"],
    "nnx_api.nn.params.nn_run": ["NNRun"],
    "nnx_api.nn.params.nn_scheduler_params": ["NNSchedulerParams"],
    "nnx_api.nn.params.nn_scheduler_params_builder": ["NNSchedulerParamsBuilder"],
    "nnx_api.nn.params.nn_train_params": ["NNTrainParams"],
    "nnx_api.nn.net.feed_fwd_nn": ["FeedFwdNN"],
    "nnx_api.nn.net.conv_nn": ["ConvNN"],
    "nnx_api.history": ["HistoryJournal", "export_history_csv", "iter_history", "migrate_history"],
    "nnx_api.monitors": ["MetricSpec", "MonitorSpec", "MonitorRecord", "MonitorUnavailableError", "register_metric"],
    "nnx_api.prediction": ["ProbabilitySpec", "PredictionResult", "PredictionValidationError", "prediction_from_logits"],
    "nnx_api.streaming": ["PredictionStream", "PredictionBatch", "StreamClosedError"],
    "nnx_api.models": ["ModelSpec", "PositionalInputs", "KeywordInputs", "register_model_factory",
                       "MissingModelFactoryError"],
    "nnx_api.finetune": ["freeze", "unfreeze", "frozen", "load_pretrained", "LoadPretrainedResult"],
    "nnx_api.finetune.param_groups": ["NNParamGroupSpec", "build_param_groups"],
    "nnx_api.tasks": ["TaskSpec", "TaskValidationError"],
    "nnx_api.precision": ["PrecisionPolicy", "PrecisionUnsupportedError", "ResolvedPrecision"],
    "nnx_api.seeding": ["set_seed"],
    "nnx_api.objectives": ["LossTerm", "Objective", "ObjectiveContext", "ObjectiveResult", "kd_objective"],
    "nnx_api.distributed": ["DDP", "init_process_group", "writer_only"],
    "nnx_api.decisions": ["FixedHeadProvider", "Choice", "Boolean", "Score", "validate_response"],
    "nnx_api.plans": ["ExperimentPlan", "FitResult"],
    "nnx_api.search": ["search", "SearchSpace", "SearchBudget"],
}

# the top-level names NNx 0.4 documents for the items above (REFERENCE §1–§3, §8, §9)
TOP_LEVEL = [
    "NNModel", "NNParams", "NNConvParams", "NNModelParams", "NNTrainParams", "NNOptimParams", "NNSchedulerParams",
    "NNTrainerParams", "NNRun", "NNCheckpoint", "NNCheckpointTransform", "NNEvaluationDataPoint",
    "NNIterationDataPoint", "FeedFwdNN", "ConvNN", "Nets", "Optims", "Schedulers", "Losses", "Activations", "Devices",
    "Checkpoints", "TrainStepFn", "EvalStepFn", "TrainerStepFn", "ProbabilitySpec", "PredictionResult",
    "PredictionValidationError", "PredictionStream", "ModelSpec", "PositionalInputs", "KeywordInputs",
    "register_model_factory", "freeze", "unfreeze", "frozen", "load_pretrained", "prediction_from_logits",
]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_nnx_module_path_imports_and_reexports_the_top_level_objects(path):
    module = importlib.import_module(path)
    for name in PATHS[path]:
        value = getattr(module, name)
        if hasattr(nnx, name) and not inspect.ismodule(getattr(nnx, name)):  # nnx.search is the module, as in NNx
            assert value is getattr(nnx, name), f"{path}.{name} is not nnx_api.{name}"


def test_the_documented_top_level_names_exist():
    missing = [name for name in TOP_LEVEL if getattr(nnx, name, None) is None]
    assert missing == []
    assert set(TOP_LEVEL) <= set(nnx.__all__)


@pytest.mark.parametrize("path", sorted(p for p in PATHS if p.startswith("nnx_api.nn.")))
def test_the_nn_modules_hold_no_code_of_their_own(path):
    """Re-export modules only: every public object is defined in another module."""
    module = importlib.import_module(path)
    for name in getattr(module, "__all__", ()):
        defined_in = getattr(getattr(module, name), "__module__", None)
        assert defined_in != path, f"{path}.{name} is defined in the re-export module itself"


def test_records_are_one_class_under_both_names():
    from nnx_api.nn.params.nn_evaluation_data_point import NNEvaluationDataPoint
    from nnx_api.nn.params.nn_iteration_data_point import NNIterationDataPoint

    assert NNEvaluationDataPoint is nnx.EvaluationDataPoint
    assert NNIterationDataPoint is nnx.IterationDataPoint


@pytest.mark.parametrize(
    "path, name, scope",
    [
        ("nnx_api.nn.net.graph_conv_nn", "GraphConvNN", "graph nets"),
        ("nnx_api.nn.net.transformer_nn", "TransformerNN", "transformers"),
        ("nnx_api.nn.params.nn_transformer_params", "NNTransformerParams", "transformers"),
        ("nnx_api.nn.params.nn_moe_params", "NNMoEParams", "mixture-of-experts"),
        ("nnx_api.nn.generative_nn_model", "GenerativeNNModel", "language-model"),
    ],
)
def test_out_of_scope_names_import_but_refuse_to_be_used_naming_the_scope(path, name, scope):
    module = importlib.import_module(path)
    namespace: dict = {}
    exec(f"from {path} import {name}", namespace)  # a script that only imports it still loads
    placeholder = namespace[name]
    assert placeholder is not None and not isinstance(object(), placeholder)
    with pytest.raises(nnx.OutOfScopeError, match=scope):
        placeholder()
    with pytest.raises(nnx.OutOfScopeError, match=scope):
        getattr(module, name).builder()


@pytest.mark.parametrize(
    "name, scope",
    [("GraphSageNN", "graph nets"), ("NNTransformerParams", "transformers"), ("apply_lora_to", "LoRA"),
     ("quantize_int8", "quantisation"), ("interop", "GGUF"), ("GenerativeNNModel", "language-model")],
)
def test_out_of_scope_top_level_names_are_refused_naming_the_scope(name, scope):
    with pytest.raises(nnx.OutOfScopeError, match=scope):
        getattr(nnx, name)(None)
    with pytest.raises(nnx.OutOfScopeError, match=scope):
        getattr(nnx, name).anything
    assert issubclass(nnx.OutOfScopeError, NotImplementedError)


def test_an_unknown_name_is_still_an_attribute_error():
    assert not hasattr(nnx, "NoSuchThing")


def test_hub_methods_and_provenance_are_refused_naming_the_scope(tmp_path):
    """REFERENCE §3.1/§3.3: the Hub mixin and ``train(provenance=...)`` are outside this scope."""
    model = nnx.NNModel(nnx.NNParams(input_dim=2, output_dim=2), nnx.NNModelParams())
    with pytest.raises(nnx.OutOfScopeError, match="Hugging Face Hub"):
        model.save_pretrained(tmp_path / "hub")
    with pytest.raises(nnx.OutOfScopeError, match="Hugging Face Hub"):
        nnx.NNModel.from_pretrained("user/model")
    params = nnx.NNTrainParams(n_epochs=1, train_loader=[(torch.zeros(2, 2), torch.zeros(2, dtype=torch.long))])
    with pytest.raises(nnx.OutOfScopeError, match="provenance"):
        model.train(params, root=tmp_path, provenance=object())
    assert not any(tmp_path.iterdir())  # refused before anything is written


@pytest.mark.parametrize("name", ["NLIProvider", "JevProvider", "JevTimeout"])
def test_nli_and_jev_providers_are_refused_naming_the_scope(name):
    namespace: dict = {}
    exec(f"from nnx_api.decisions import {name}", namespace)
    with pytest.raises(nnx.OutOfScopeError, match="NLI and Jev"):
        namespace[name]()
    with pytest.raises(AttributeError):
        nnx.decisions.NoSuchProvider  # noqa: B018


def test_the_compat_page_example_runs_and_its_migration_rewrites_nnx_imports(tmp_path, monkeypatch):
    """docs/nnx-compat.md: its example runs as written; its one-line migration turns NNx imports
    into these (and leaves other modules alone)."""
    import re
    import subprocess

    from tests.api.ecosystem_helpers import ROOT, run_doc

    ns = run_doc("nnx-compat.md", tmp_path, monkeypatch)
    assert ns["restored"].predict(X=ns["x"]).classes.shape == (64,)
    command = re.search(r"^(sed -i .*)$", (ROOT / "docs" / "nnx-compat.md").read_text(), re.M).group(1)
    script = tmp_path / "user.py"
    script.write_text(
        "import nnx\nfrom nnx.nn.callbacks import EarlyStopping\nimport nnx.history\nimport nnx as n2\nimport nnxother\n"
        "def f():\n    import nnx\n    return nnx.history.iter_history, EarlyStopping, n2.NNModel\n"
    )
    subprocess.run(command.replace("*.py", str(script)), shell=True, check=True, timeout=60)  # noqa: S602 - our doc
    assert script.read_text() == (
        "import nnx_api as nnx\nfrom nnx_api.nn.callbacks import EarlyStopping\n"
        "import nnx_api.history; import nnx_api as nnx\nimport nnx_api as n2\nimport nnxother\n"
        "def f():\n    import nnx_api as nnx\n    return nnx.history.iter_history, EarlyStopping, n2.NNModel\n"
    )
