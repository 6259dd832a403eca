"""Opt-in compilation, written from NNx 0.4's documentation (REFERENCE §11 "compile", FEAT-029;
§9.1 "not part of the id: … compile"; §9.3 metadata.yaml "also stores … compile record"; §9.5 the
checkpoint's training state "adds … compile"):

``train(..., compile=CompileSpec(backend="inductor", mode=None, fullgraph=False, dynamic=None,
on_failure="error"|"eager"))`` compiles only the built-in FP32 default-step forward (and in-fit
validation) for built-in non-graph nets; the wrapper is never assigned to ``model.net``
(checkpoint keys stay eager); refused with a custom step, an objective, reduced precision,
topology-changing callbacks; ``CompileRecord`` (effective pending|compiled|eager|failed,
graph_breaks, capture full|partial, restart) in ``NNRun.compile``, metadata.yaml, checkpoints, attempt.json; never part of the run id.

The backend here is torch's ``"eager"`` backend (dynamo traces the forward; no C++ compiler
needed); the inductor cases are in ``tests/api/test_compile.py``.
"""

from __future__ import annotations

import json

import pytest
import torch
from ruamel.yaml import YAML

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data

EAGER = nnx.CompileSpec(backend="eager")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each case compiles from scratch (dynamo's caches are per process)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def model(seed: int = 0, **model_params) -> nnx.NNModel:
    torch.manual_seed(seed)
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams(**model_params))


def params(**changes) -> nnx.NNTrainParams:
    x, y = tiny_data()
    return nnx.NNTrainParams(**{"n_epochs": 2, "seed": 0, "train_loader": batches(x, y, 16), "val_loader": [(x, y)],
                                **changes})


def snapshot(root):
    return None if not root.exists() else {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_compile_spec_has_the_documented_fields_and_defaults():
    spec = nnx.CompileSpec()
    assert (spec.backend, spec.mode, spec.fullgraph, spec.dynamic, spec.on_failure) == ("inductor", None, False, None, "error")
    assert nnx.CompileSpec(on_failure="eager").on_failure == "eager"
    with pytest.raises(nnx.ParamsError, match="on_failure"):
        nnx.CompileSpec(on_failure="ignore")


def test_a_compiled_run_records_what_was_compiled_on_the_run(runs):
    run = model().train(params(), root=runs, compile=EAGER)
    record = run.compile
    assert isinstance(record, nnx.CompileRecord)
    assert record.effective in ("pending", "compiled", "eager", "failed") and record.effective == "compiled"
    assert set(record.forwards) == {"train_forward", "val_forward"}  # the default step and in-fit validation
    assert record.graph_breaks == 0 and record.capture == "full" and record.restart is None
    assert (record.backend, record.on_failure, record.torch_version) == ("eager", "error", torch.__version__)
    assert record.options == {"mode": None, "fullgraph": False, "dynamic": None}
    assert nnx.NNRun.load(run.id, runs).compile == record


def test_compile_is_never_part_of_the_run_id(runs, tmp_path):
    plain = model().train(params(), root=tmp_path / "plain")
    compiled = model().train(params(), root=runs, compile=EAGER)
    assert compiled.id == plain.id


def test_the_wrapper_is_never_model_net_and_checkpoint_keys_stay_eager(runs):
    m = model()
    net = m.net
    run = m.train(params(), root=runs, compile=EAGER)
    assert m.net is net and type(m.net).__name__ == "FeedFwdNN"
    eager_keys = list(net.state_dict())
    for tag in run.tags():
        keys = list(run.checkpoint(tag).weights())
        assert keys == eager_keys and not any("_orig_mod" in k for k in keys)
    assert not any(b"_orig_mod" in data for data in snapshot(runs).values())  # nowhere on disk
    nnx.NNModel.from_checkpoint(run.id, root=runs)  # loads back into an eager net


def test_the_record_is_in_metadata_the_checkpoints_and_the_attempt_record(runs):
    run = model().train(params(), root=runs, compile=EAGER)
    state = run.compile.record()
    meta = YAML(typ="safe").load((run.path / "metadata.yaml").read_text())
    attempt = json.loads((run.path / "attempt.json").read_text())
    assert meta["compile"] == state and attempt["compile"] == state
    assert all(run.checkpoint(tag).payload()["compile"] == state for tag in run.tags())


CUSTOM_STEP = {"train_step_fn": nnx.default_train_step}


class Surgery(nnx.Callback):
    """A topology-changing callback: it declares the transform it applies at the end."""

    def checkpoint_transforms(self):
        return ({"name": "prune", "version": 1},)


@pytest.mark.parametrize(("build", "call"), [
    pytest.param({}, CUSTOM_STEP, id="custom step"),
    pytest.param({}, {"objective": nnx.supervised_objective()}, id="objective"),
    pytest.param({"precision": nnx.PrecisionPolicy("bf16")}, {}, id="reduced precision"),
    pytest.param({}, {"callbacks": [Surgery()]}, id="topology-changing callback"),
])
def test_compile_is_refused_before_anything_is_written(runs, build, call):
    with pytest.raises(nnx.NNxError, match="compile"):
        model(**build).train(params(), root=runs, compile=EAGER, **call)
    assert snapshot(runs) is None


def test_an_unknown_backend_is_a_value_error_before_anything_is_written(runs):
    with pytest.raises(ValueError, match="not a torch.compile backend"):
        model().train(params(), root=runs, compile=nnx.CompileSpec(backend="no-such-backend"))
    assert snapshot(runs) is None


class BreakEveryForward(nnx.Callback):
    """A deliberate graph break in every forward of the net (a forward pre-hook)."""

    def on_train_begin(self, ctx):
        ctx.model.net.register_forward_pre_hook(lambda module, args: torch._dynamo.graph_break())


def test_on_failure_eager_restarts_the_forward_warns_and_records_where_and_why(runs):
    with pytest.warns(RuntimeWarning, match="eager"):
        run = model().train(params(), root=runs, callbacks=[BreakEveryForward()],
                            compile=nnx.CompileSpec(backend="eager", fullgraph=True, on_failure="eager"))
    restart = run.compile.restart
    assert run.compile.effective == "eager" and run.compile.capture is None
    assert (restart["phase"], restart["epoch"], restart["batch"], restart["error"]) == ("train", 0, 0, "Unsupported")


def test_on_failure_error_raises_a_typed_error_saying_what_to_do(runs):
    with pytest.raises(nnx.CompileError, match="on_failure='eager'") as raised:
        model().train(params(), root=runs, callbacks=[BreakEveryForward()],
                      compile=nnx.CompileSpec(backend="eager", fullgraph=True))
    assert raised.value.record.effective == "failed" and raised.value.record.restart["stage"] == "forward"
    assert isinstance(raised.value.__cause__, torch._dynamo.exc.Unsupported)
