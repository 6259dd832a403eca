"""ONNX export with an ONNX Runtime parity check, safetensors export, `nnx runs export`."""

from __future__ import annotations

import io
import os
import stat
import sys

import numpy as np
import pytest
import torch

import nnx_api as nnx
from nnx_api.cli import main
from nnx_api.runs.export import check_onnx_parity, export_safetensors, load_safetensors

from tests.api.ecosystem_helpers import digits_tensors, run_doc, train_digits


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("export") / "runs"
    model, run = train_digits(root, epochs=3, hidden=(32, 16))
    return root, model, run


def ort_session(path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def test_onnx_export_of_a_digits_mlp_matches_pytorch_on_batches_1_2_7(digits_run, tmp_path):
    _, model, _ = digits_run
    x, _ = digits_tensors()
    model.net.train()  # export must run in eval mode and give the caller's modes back
    path = model.to_onnx(tmp_path / "digits.onnx", x[:1])
    assert path.is_file() and model.net.training
    session = ort_session(path)
    (graph_input,) = session.get_inputs()
    assert graph_input.name == "input" and graph_input.shape[0] == "batch"  # dynamic batch axis
    for rows in (1, 2, 7):
        batch = x[100 : 100 + rows]
        (got,) = session.run(None, {"input": batch.numpy()})
        expected = model.predict(batch).logits
        assert got.shape == (rows, 10)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
        assert np.array_equal(got.argmax(1), expected.argmax(1))
    assert len(check_onnx_parity(model, path, [x[:1], x[:2], x[:7]])) == 3


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript-exporter", "dynamo-exporter"])
def test_onnx_conformance_profile(tmp_path, dynamo):
    """REFERENCE's two export-conformance profiles: FeedFwdNN 4-8-2, ReLU, FP32, opset 17, each
    exporter; CPUExecutionProvider with one thread; batches 1/2/3/7 match (rtol 1e-4, atol 1e-5);
    an input of width 5 is refused."""
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=2, hidden_dims=(8,)), nnx.NNModelParams())
    assert model.net.params.activation is nnx.Activations.RELU and next(model.net.parameters()).dtype == torch.float32
    path = model.to_onnx(tmp_path / "ffn.onnx", torch.randn(1, 4), opset=17, dynamo=dynamo)
    import onnx

    assert {o.domain: o.version for o in onnx.load(str(path)).opset_import}[""] == 17
    gen = torch.Generator().manual_seed(1)
    assert len(check_onnx_parity(model, path, [torch.randn(rows, 4, generator=gen) for rows in (1, 2, 3, 7)])) == 4
    with pytest.raises(Exception, match="(?i)invalid|dimension"):
        ort_session(path).run(None, {"input": np.zeros((2, 5), dtype=np.float32)})


def test_safetensors_export_of_a_runs_best_checkpoint_and_of_a_model(digits_run, tmp_path):
    root, model, run = digits_run
    path = export_safetensors(run.id, tmp_path / "best.safetensors", tag="best", root=root)
    tensors, meta = load_safetensors(path)
    checkpoint = run.checkpoint("best")
    weights = checkpoint.weights()
    assert tensors.keys() == weights.keys()
    assert all(torch.equal(tensors[k], weights[k]) for k in weights)
    assert meta["nnx.run_id"] == run.id and meta["nnx.tag"] == "best"
    assert meta["nnx.epoch"] == str(checkpoint.epoch)
    assert meta["nnx.sha256"] == checkpoint.manifest.blobs["state"].sha256
    from safetensors.torch import load_file

    assert load_file(path).keys() == weights.keys()  # a plain safetensors file for any reader
    current = export_safetensors(model, tmp_path / "model.safetensors", metadata={"note": "latest"})
    tensors, meta = load_safetensors(current)
    assert meta["note"] == "latest" and "nnx.run_id" not in meta
    assert all(torch.equal(tensors[k], v) for k, v in model.net.state_dict().items())
    with pytest.raises(nnx.RunNotFoundError, match="q9"):
        export_safetensors(run.id, tmp_path / "x.safetensors", tag="q9", root=root)


def test_nnx_runs_export_writes_safetensors_and_onnx(digits_run, tmp_path):
    root, _, run = digits_run
    out = io.StringIO()
    target = tmp_path / "model.safetensors"
    code = main(["runs", "export", run.id, "--tag", "best", str(target), "--root", str(root)], out=out, err=out)
    assert code == 0, out.getvalue()
    assert f"wrote {target}" in out.getvalue()
    tensors, meta = load_safetensors(target)
    assert meta["nnx.tag"] == "best" and meta["nnx.run_id"] == run.id
    onnx_path = tmp_path / "model.onnx"
    assert main(["runs", "export", run.id, str(onnx_path), "--root", str(root)], out=out, err=out) == 0
    best = nnx.NNModel.from_checkpoint(run.id, "best", root=root)
    x, _ = digits_tensors()
    (got,) = ort_session(onnx_path).run(None, {"input": x[:7].numpy()})
    np.testing.assert_allclose(got, best.predict(x[:7]).logits, rtol=1e-4, atol=1e-5)
    dynamo_path = tmp_path / "model-dynamo.onnx"
    assert main(["runs", "export", run.id, str(dynamo_path), "--dynamo", "--root", str(root)], out=out, err=out) == 0
    (got,) = ort_session(dynamo_path).run(None, {"input": x[:7].numpy()})
    np.testing.assert_allclose(got, best.predict(x[:7]).logits, rtol=1e-4, atol=1e-5)
    assert main(["runs", "export", run.id, str(tmp_path / "model.bin"), "--root", str(root)], out=out, err=out) == 2


def test_exporters_name_their_extra_when_missing(digits_run, tmp_path, monkeypatch):
    _, model, _ = digits_run
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(ImportError, match=r'pip install "nnx\[export\]"'):
        export_safetensors(model, tmp_path / "m.safetensors")
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r'pip install "nnx\[export\]"'):
        model.to_onnx(tmp_path / "m.onnx", torch.zeros(1, 64))


def test_docs_export_snippet_runs(tmp_path, monkeypatch):
    ns = run_doc("export.md", tmp_path, monkeypatch)
    assert (tmp_path / "digits.onnx").is_file() and (tmp_path / "digits.safetensors").is_file()
    assert ns["worst"] < 1e-3


def test_a_safetensors_export_gets_the_mode_any_new_file_gets(tmp_path):
    """Like ``open(path, "w")``: 0666 less the umask (safetensors itself leaves 0600)."""
    mask = os.umask(0o027)
    try:
        path = export_safetensors(torch.nn.Linear(2, 2), tmp_path / "m.safetensors")
        (tmp_path / "plain").write_bytes(b"")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o640
