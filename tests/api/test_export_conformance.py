"""ONNX export conformance profiles (``nnx_api.export_conformance``), against oracles outside it:
ONNX Runtime run directly on the written file against a net whose weights are drawn here by hand,
SHA-256 computed here, a record written by hand from the documented schema, and NNx 0.4.1's own
validator reading the records and artifacts this package writes (where ``.venv-nnx`` is installed)."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import nnx_api.export_conformance as conformance
from nnx_api.export_conformance import (
    EXIT_CODES,
    ConformanceError,
    execute,
    exit_code,
    main,
    run_profile,
    run_profiles,
    save_report,
    validate_record,
    verify_artifacts,
)

ROOT = Path(__file__).resolve().parents[2]
NNX_PYTHON = ROOT / ".venv-nnx" / "bin" / "python"
NNX_INSTALLED = ROOT / ".venv-nnx" / ".installed"
TORCHSCRIPT = "feedfwd-fp32-torchscript"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Both tested profiles, run once: (the artifact root, the report)."""
    root = tmp_path_factory.mktemp("conformance")
    return root, run_profiles(root, source_revision="abc123")


def hand_net_logits(x: torch.Tensor) -> np.ndarray:
    """The 4-8-2 ReLU net of the tested profiles, its weights drawn here in the documented order
    (layer by layer, weight then bias, N(0, 0.5²) from torch.Generator seeded 0)."""
    generator = torch.Generator().manual_seed(0)
    w0, b0, w1, b1 = (torch.randn(shape, generator=generator) * 0.5 for shape in ((8, 4), (8,), (2, 8), (2,)))
    return (torch.relu(x @ w0.T + b0) @ w1.T + b1).numpy()


def test_both_tested_profiles_execute_and_the_file_matches_a_hand_built_net(report):
    import onnxruntime as ort

    root, result = report
    assert result["status"] == "passed" and exit_code(result) == 0
    for record in result["profiles"]:
        validate_record(record)
        assert (record["status"], record["level"], record["failure"]) == ("passed", "executed", None), record["stages"]
        assert [case["shape"][0] for case in record["input_cases"] if case["expect"] == "match"] == [1, 2, 3, 7]
        assert all(case["max_abs_error"] <= 1e-5 for case in record["input_cases"] if case["expect"] == "match")
        (model,) = [entry for entry in record["artifacts"]["files"] if entry["role"] == "model"]  # dynamo adds a sidecar
        path = root / record["profile"] / "model.onnx"
        assert model["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert model["bytes"] == path.stat().st_size
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))  # a batch no profile case uses
        (got,) = session.run(None, {"features": x.numpy()})
        np.testing.assert_allclose(got, hand_net_logits(x), rtol=1e-4, atol=1e-5)
        assert record["source"] == {**record["source"], "revision": "abc123", "origin": "given"}


@pytest.mark.skipif(not NNX_INSTALLED.exists(), reason="NNx 0.4.1 is installed (.venv-nnx) by `make compat-diff` only")
def test_nnx_own_validator_accepts_our_records_and_artifacts(report, tmp_path):
    root, result = report
    save_report(result, tmp_path / "conformance.json")
    code = (
        "import json, sys\n"
        "import nnx.export_conformance as c\n"
        "report = json.load(open(sys.argv[1]))\n"
        "for record in report['profiles']:\n"
        "    c.validate_record(record)\n"
        "    c.verify_artifacts(record, sys.argv[2])\n"
        "    assert record['config']['weights_sha256'] == c._weights_digest(c.build_model().net)\n"
        "print(json.dumps(c.EXIT_CODES))\n"
    )
    done = subprocess.run([str(NNX_PYTHON), "-c", code, str(tmp_path / "conformance.json"), str(root)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == dict(EXIT_CODES)


# A record written by hand from the schema docs/export.md describes: the runtime was not installed.
CASES = [*({"name": f"batch-{b}", "shape": [b, 4], "seed": 1000 + b, "expect": "match"} for b in (1, 2, 3, 7)),
         {"name": "width-5", "shape": [3, 5], "seed": 2000, "expect": "rejected"}]
HAND_RECORD = {
    "format": "nnx.export-conformance/1", "profile": TORCHSCRIPT, "status": "failed", "failure": "missing-dependency",
    "level": "none", "source": {"revision": "abc123", "origin": "given", "dirty": None, "nnx_version": None},
    "config": {"net": "feed_fwd", "input_dim": 4, "hidden_dims": [8], "output_dim": 2, "activation": "relu",
               "dropout": 0.0, "weights": {"generator": "torch.Generator", "seed": 0, "distribution": "normal", "std": 0.5},
               "weights_sha256": "0" * 64},
    "exporter": {"name": "torchscript", "options": {
        "exporter": "torchscript", "dynamo": False, "opset_version": 17, "dynamic_batch": True, "export_batch": 2,
        "input_names": ["features"], "output_names": ["logits"]}},
    "opset": {"requested": 17, "model": None},
    "artifacts": {"directory": TORCHSCRIPT, "model": "model.onnx", "files": []},
    "versions": {"python": "3.11"},
    "runtime": {"name": "onnxruntime", "version": None, "provider": "CPUExecutionProvider",
                "session": {"intra_op_num_threads": 1, "inter_op_num_threads": 1, "graph_optimization_level": "ORT_ENABLE_ALL"}},
    "dtype": "float32",
    "input_cases": [{**case, "outcome": None, "passed": False, "failure": None, "max_abs_error": None,
                     "max_rel_error": None, "detail": None} for case in CASES],
    "tolerances": {"rtol": 1e-4, "atol": 1e-5},
    "model_state": None,
    "stages": {"dependencies": {"status": "failed", "failure": "missing-dependency", "detail": "onnxruntime: not installed"},
               **{name: {"status": "not_run", "failure": None, "detail": None} for name in ("export", "check", "load", "parity")}},
}


def edited(change):
    record = copy.deepcopy(HAND_RECORD)
    change(record)
    return record


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.update(status="passed"), "status 'passed' contradicts"),
    (lambda r: r.update(level="structural"), "level 'structural' contradicts"),
    (lambda r: r["stages"]["export"].update(status="passed"), "ran after an earlier stage"),
    (lambda r: r["stages"]["dependencies"].update(failure="hash-mismatch"), "not one of"),
    (lambda r: r.update(model_state={"parameters": True, "gradients": True, "modes": True}), "no model_state"),
    (lambda r: r["input_cases"][0].update(outcome="match", passed=True), "no input case may carry an outcome"),
    (lambda r: r["tolerances"].update(atol=1.0), "settings differ"),
    (lambda r: r["config"].update(hidden_dims=[9]), "settings differ"),
    (lambda r: r.update(extra=1), "unknown keys"),
    (lambda r: r["runtime"].update(provider="CUDAExecutionProvider"), "settings differ"),
])
def test_a_hand_written_record_is_accepted_and_each_contradiction_refused(change, message):
    validate_record(HAND_RECORD)
    assert exit_code({"profiles": [HAND_RECORD]}) == 10
    with pytest.raises(ConformanceError, match=message):
        validate_record(edited(change))


def test_a_missing_runtime_writes_the_hand_written_record(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    record = run_profile(TORCHSCRIPT, tmp_path, source_revision="abc123")
    for key in ("format", "profile", "status", "failure", "level", "exporter", "opset", "artifacts", "dtype",
                "input_cases", "tolerances", "model_state"):
        assert record[key] == HAND_RECORD[key], key
    assert {name: stage["status"] for name, stage in record["stages"].items()} == {
        name: stage["status"] for name, stage in HAND_RECORD["stages"].items()}
    assert "onnxruntime" in record["stages"]["dependencies"]["detail"]
    assert record["runtime"]["session"] == HAND_RECORD["runtime"]["session"]


def test_a_changed_artifact_is_refused_before_anything_loads(tmp_path, monkeypatch):
    import onnxruntime

    record = run_profile(TORCHSCRIPT, tmp_path)
    path = tmp_path / TORCHSCRIPT / "model.onnx"
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(ConformanceError, match="model.onnx: hash mismatch"):
        verify_artifacts(record, tmp_path)
    opened = []
    monkeypatch.setattr(onnxruntime, "InferenceSession", lambda *a, **k: opened.append(a))
    replay = execute(record, tmp_path)
    assert (replay["failure"], replay["level"], opened) == ("hash-mismatch", "structural", [])
    assert exit_code({"profiles": [replay]}) == 14


def test_a_model_the_exporter_changes_is_state_changed(tmp_path, monkeypatch):
    from nnx_api.model import NNModel

    original = NNModel.to_onnx

    def nudging(self, *args, **kwargs):
        written = original(self, *args, **kwargs)
        self.net.eval()  # the export left every submodule in eval mode
        return written

    monkeypatch.setattr(NNModel, "to_onnx", nudging)
    record = run_profile(TORCHSCRIPT, tmp_path)
    validate_record(record)
    assert record["failure"] == "state-changed" and record["model_state"] == {
        "parameters": True, "gradients": True, "modes": False}
    assert exit_code({"profiles": [record]}) == 12


def test_the_command_line_keeps_its_evidence_and_refuses_old_artifacts(tmp_path, capsys):
    output = tmp_path / "out" / "conformance.json"
    args = ["--output", str(output), "--profile", TORCHSCRIPT, "--profile", TORCHSCRIPT]
    assert main(args) == 0
    (record,) = json.loads(output.read_text())["profiles"]
    verify_artifacts(record, tmp_path / "out" / "conformance-artifacts")
    assert f"{TORCHSCRIPT}: passed; level=executed" in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:
        main(args)
    assert refused.value.code == 2 and "--force" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    done = subprocess.run([sys.executable, "-m", "nnx_api.export_conformance", "--help"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0 and "--source-revision" in done.stdout


def test_a_tested_name_with_other_settings_is_refused_before_anything_is_written(tmp_path):
    loose = conformance.Profile(TORCHSCRIPT, "torchscript", atol=1.0)
    with pytest.raises(ConformanceError, match="names a tested profile"):
        run_profile(loose, tmp_path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConformanceError, match="plain directory name"):
        conformance.Profile("../up", "torchscript")
