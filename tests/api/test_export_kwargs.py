"""``to_onnx``'s keywords: torch.onnx.export's own are passed through where they mean the same
thing and refused by name where they do not; unknown ones name the nearest known one. Every
refusal is a ``ParamsError`` raised before anything is written (docs/export.md, "torch's keywords")."""

from __future__ import annotations

import inspect

import pytest
import torch

import nnx_api as nnx
from nnx_api.runs import export
from nnx_api.runs.export import export_safetensors

onnx = pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def model():
    nnx.set_seed(0)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=2, hidden_dims=(8,)), nnx.NNModelParams())


X = torch.zeros(1, 4)


def test_every_keyword_of_torch_onnx_export_is_decided():
    """A torch release that adds a keyword fails here until docs/export.md and export.py decide it."""
    decided = {*export.BOTH_EXPORTERS, *export.TORCHSCRIPT_ONLY, *export.DYNAMO_ONLY, *export.REFUSED, *export.NNX_KEYWORDS}
    assert set(inspect.signature(torch.onnx.export).parameters) <= decided


# -- (a) passed through: the effect is torch's -----------------------------------------------------


def test_do_constant_folding_false_leaves_the_foldable_nodes_in(model, tmp_path):
    folded = onnx.load(str(model.to_onnx(tmp_path / "a.onnx", X)))
    unfolded = onnx.load(str(model.to_onnx(tmp_path / "b.onnx", X, do_constant_folding=False)))
    assert len(unfolded.graph.node) > len(folded.graph.node)


def test_export_params_false_writes_no_initializers_and_takes_the_weights_as_inputs(model, tmp_path):
    graph = onnx.load(str(model.to_onnx(tmp_path / "a.onnx", X, export_params=False))).graph
    assert len(graph.initializer) == 0
    assert [i.name for i in graph.input][0] == "input" and len(graph.input) == 1 + len(list(model.net.parameters()))


def test_keep_initializers_as_inputs_and_opset_version(model, tmp_path):
    graph = onnx.load(str(model.to_onnx(tmp_path / "a.onnx", X, keep_initializers_as_inputs=True, opset_version=13)))
    assert len(graph.graph.initializer) == 4 and len(graph.graph.input) == 5
    assert {o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")} == {13}


def test_dynamic_axes_replaces_the_dynamic_batch_axis(model, tmp_path):
    graph = onnx.load(str(model.to_onnx(tmp_path / "a.onnx", X, dynamic_axes={"input": {0: "rows"}}))).graph
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "rows"
    dims = [d.dim_param for v in (*graph.input, *graph.output) for d in v.type.tensor_type.shape.dim]
    assert "batch" not in dims  # NNx's own dynamic batch axis gave way to the caller's


def test_a_dynamo_only_option_passes_through_with_dynamo(model, tmp_path):
    pytest.importorskip("onnxscript")
    model.to_onnx(tmp_path / "a.onnx", X, dynamo=True, external_data=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.onnx"]  # the weights are inside: no a.onnx.data


# -- (b) refused by name, nothing written ----------------------------------------------------------


REFUSALS = {
    "f": ({"f": "other.onnx"}, ["'f'", "path"]),
    "args": ({"args": (X,)}, ["'args'", "example_input"]),
    "kwargs": ({"kwargs": {"x": X}}, ["'kwargs'", "example_input"]),
    "model": ({"model": None}, ["'model'", "own net"]),
    "training": ({"training": torch.onnx.TrainingMode.TRAINING}, ["training", "eval mode"]),
    "operator_export_type": ({"operator_export_type": torch.onnx.OperatorExportTypes.ONNX_ATEN_FALLBACK},
                             ["operator_export_type", "OperatorExportTypes.ONNX"]),
    "torchscript option with dynamo": ({"dynamo": True, "do_constant_folding": False},
                                       ["do_constant_folding", "dynamo=False"]),
    "dynamo option without dynamo": ({"optimize": False}, ["optimize", "dynamo=True"]),
    "dynamic_axes against dynamic_batch": ({"dynamic_batch": False, "dynamic_axes": {"input": [0]}},
                                           ["dynamic_axes", "dynamic_batch=False"]),
    "dynamic_shapes against dynamic_batch": ({"dynamo": True, "dynamic_batch": False, "dynamic_shapes": ({0: None},)},
                                             ["dynamic_shapes", "dynamic_batch=False"]),
    "dynamic_axes of an unknown name": ({"dynamic_axes": {"x": [0]}}, ["dynamic_axes", "'x'", "input_names"]),
    "export_params with dynamo": ({"dynamo": True, "export_params": False}, ["export_params", "dynamo=False"]),
    "not a bool": ({"do_constant_folding": "no"}, ["do_constant_folding", "True or False"]),
    "opset twice": ({"opset": 13, "opset_version": 17}, ["opset_version", "not both"]),
    "typo": ({"do_constant_fold": False}, ["do_constant_fold", "did you mean 'do_constant_folding'"]),
    "typo of NNx's": ({"dynamic_batches": False}, ["dynamic_batches", "did you mean 'dynamic_batch'"]),
}


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_a_refused_keyword_is_a_params_error_naming_it_and_nothing_is_written(model, tmp_path, case):
    options, names = REFUSALS[case]
    target = tmp_path / "sub" / "m.onnx"
    with pytest.raises(nnx.ParamsError) as info:
        model.to_onnx(target, X, **options)
    for name in names:
        assert name in str(info.value)
    assert not target.exists() and not target.parent.exists() and not (tmp_path / "other.onnx").exists()


def test_the_function_refuses_as_the_method_does(model, tmp_path):
    with pytest.raises(nnx.ParamsError, match="'f'.*path"):
        export.to_onnx(model, f=str(tmp_path / "m.onnx"), args=(X,))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("name", "ours"), [("filename", "path"), ("tensors", "source"), ("meta_data", "metadata")])
def test_export_safetensors_names_its_own_keyword(model, tmp_path, name, ours):
    target = tmp_path / "m.safetensors"
    with pytest.raises(nnx.ParamsError, match=f"{name}.*NNx's is '{ours}'"):
        export_safetensors(model, target, **{name: "x"})
    assert not target.exists()
