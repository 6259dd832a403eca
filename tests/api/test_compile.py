"""``train(compile=CompileSpec(...))`` beyond the documented surface (tests/compat/test_compile_compat.py):

* exactness: torch's ``"eager"`` backend traces the forward and runs the same aten ops, so a
  compiled run's weights, history and checkpoints are ``torch.equal`` to the uncompiled run's —
  with dropout, a shuffling loader and an uneven last validation batch (a recompile) — and a
  resumed compiled run equals the uninterrupted one;
* ``compile=None`` writes nothing new: no ``compile`` key anywhere, and a compiled run's file
  events are the plain run's plus exactly one metadata.yaml rewrite before the attempt's end;
* failures: ``torch.compile`` raising (wrap) and a backend failing at the first call, under both
  ``on_failure`` policies;
* inductor (C++ through the system compiler): one step within the float32 rounding bound.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx

from tests.api.tiny import batches, sgd_step_tolerance, tiny_data

EAGER = nnx.CompileSpec(backend="eager")
BROKEN = "nnx_test_broken_backend"


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def job(n_epochs: int = 3, **changes):
    """A seeded model with dropout, a shuffling train loader and a validation loader whose last
    batch is shorter (4 of 10 rows: the validation forward is compiled for two shapes)."""
    x, y = tiny_data(n=64)
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(16, 8), dropout_prob=0.25))
    params = nnx.NNTrainParams(**{
        "n_epochs": n_epochs, "seed": 0, "resume": "auto", "val_loader": DataLoader(TensorDataset(x, y), batch_size=10),
        "train_loader": DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(1)),
        **changes,
    })
    return model, params


def same_state(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_the_eager_backend_trains_bit_for_bit_what_the_uncompiled_run_trains(tmp_path):
    plain_model, params = job()
    plain = plain_model.train(params, root=tmp_path / "plain")
    model, params = job()
    compiled = model.train(params, root=tmp_path / "compiled", compile=EAGER)
    assert compiled.compile.effective == "compiled"
    assert same_state(model.net.state_dict(), plain_model.net.state_dict())
    assert compiled.idps == plain.idps  # every batch's loss and every validation record
    for tag in plain.tags():
        assert same_state(compiled.checkpoint(tag).weights(), plain.checkpoint(tag).weights())


class CrashAt(nnx.Callback):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch_begin(self, ctx):
        if ctx.epoch == self.epoch:
            raise RuntimeError("interrupted")


def test_a_resumed_compiled_run_rewraps_records_its_attempt_and_equals_the_uninterrupted_one(tmp_path):
    whole_model, params = job(n_epochs=4)
    whole = whole_model.train(params, root=tmp_path / "whole", compile=EAGER)
    root = tmp_path / "resumed"
    model, params = job(n_epochs=4)
    with pytest.raises(RuntimeError, match="interrupted"):
        model.train(params, root=root, callbacks=[CrashAt(2)], compile=EAGER)
    first = json.loads((root / whole.id / "attempt.json").read_text())
    assert first["status"] == "failed" and first["compile"]["effective"] == "compiled"
    torch._dynamo.reset()  # the second attempt compiles afresh, as a new process would
    model, params = job(n_epochs=4)
    resumed = model.train(params, root=root, compile=EAGER)
    assert resumed.resume_status.mode == "stateful" and resumed.resume_status.source_epoch == 1
    attempt = json.loads((root / whole.id / "attempt.json").read_text())
    assert attempt["attempt_id"] != first["attempt_id"] and attempt["compile"]["effective"] == "compiled"
    assert resumed.compile.effective == "compiled" and nnx.NNRun.load(resumed.id, root).compile == resumed.compile
    assert same_state(model.net.state_dict(), whole_model.net.state_dict())
    assert resumed.idps == whole.idps


def test_resuming_a_compiled_run_without_compile_records_no_compile(tmp_path):
    model, params = job(n_epochs=2)
    root = tmp_path / "runs"
    with pytest.raises(RuntimeError):
        model.train(params, root=root, callbacks=[CrashAt(1)], compile=EAGER)
    model, params = job(n_epochs=2)
    run = model.train(params, root=root)
    assert run.compile is None and nnx.NNRun.load(run.id, root).compile is None  # metadata: the latest attempt's
    assert "compile" not in json.loads((run.path / "attempt.json").read_text())
    assert "compile" in run.checkpoint("first").payload() and "compile" not in run.checkpoint("last").payload()


class FileEvents:
    """Every ``FileStorage`` mutation, in order, as (operation, path with content hashes masked)."""

    def __init__(self, monkeypatch) -> None:
        self.log: list[tuple[str, str]] = []
        for name in ("write", "append", "copy", "delete"):
            monkeypatch.setattr(FileStorage, name, self._wrap(name, getattr(FileStorage, name)))

    def _wrap(self, name, original):
        def op(storage, path, *args, **kwargs):
            where = f"{path} -> {args[0]}" if name == "copy" else path
            self.log.append((name, re.sub(r"[0-9a-f]{16,}", "<hash>", where)))
            return original(storage, path, *args, **kwargs)

        return op


def test_without_compile_nothing_new_is_written_and_compile_adds_one_metadata_rewrite(tmp_path, monkeypatch):
    model, params = job()
    with monkeypatch.context() as mp:
        events = FileEvents(mp)
        plain = model.train(params, root=tmp_path / "plain")
    plain_events = events.log
    meta = (plain.path / "metadata.yaml").read_text()
    assert "compile" not in meta and "compile" not in json.loads((plain.path / "attempt.json").read_text())
    assert all("compile" not in plain.checkpoint(tag).payload() for tag in plain.tags())
    assert plain.compile is None and nnx.NNRun.load(plain.id, tmp_path / "plain").compile is None
    model, params = job()
    with monkeypatch.context() as mp:
        events = FileEvents(mp)
        model.train(params, root=tmp_path / "compiled", compile=EAGER)
    metadata = ("write", f"{plain.id}/metadata.yaml".replace(plain.id, "<hash>"))
    assert events.log == [*plain_events[:-1], metadata, plain_events[-1]]
    assert plain_events[-1][1].endswith("attempt.json")


@pytest.mark.parametrize("on_failure", ["error", "eager"])
def test_an_unknown_backend_is_refused_before_anything_is_written_under_either_policy(runs, on_failure):
    model, params = job()
    with pytest.raises(nnx.ParamsError, match="compile.backend: 'no-such-backend' is not a torch.compile backend"):
        model.train(params, root=runs, compile=nnx.CompileSpec(backend="no-such-backend", on_failure=on_failure))
    assert not runs.exists()


def test_torch_compile_raising_falls_back_to_the_eager_forward(tmp_path, monkeypatch):
    plain_model, params = job()
    plain_model.train(params, root=tmp_path / "plain")

    def refuse(*args, **kwargs):
        raise RuntimeError("this platform cannot compile")

    monkeypatch.setattr(torch, "compile", refuse)
    model, params = job()
    with pytest.warns(RuntimeWarning, match="cannot compile.*eager forward"):
        run = model.train(params, root=tmp_path / "compiled", compile=nnx.CompileSpec(on_failure="eager"))
    assert run.compile.effective == "eager" and "this platform cannot compile" in run.compile.restart["message"]
    assert run.compile.restart["stage"] == "wrap"
    assert nnx.NNRun.load(run.id, tmp_path / "compiled").compile == run.compile
    assert same_state(model.net.state_dict(), plain_model.net.state_dict())


@pytest.fixture(scope="module")
def broken_backend():
    """A registered backend that fails when dynamo hands it the first graph (at the first call)."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    def broken(graph, example_inputs):
        raise RuntimeError("the backend failed on this graph")

    register_backend(broken, name=BROKEN)
    yield BROKEN
    # both registries: the fixture is set up again when a random test order leaves the module and comes back
    _BACKENDS.pop(BROKEN, None)
    _COMPILER_FNS.pop(BROKEN, None)


def test_a_backend_failing_at_the_first_call_with_on_failure_error(runs, broken_backend):
    model, params = job()
    with pytest.raises(nnx.CompileError, match="BackendCompilerFailed") as raised:
        model.train(params, root=runs, compile=nnx.CompileSpec(backend=broken_backend))
    assert raised.value.record.effective == "failed"
    restart = raised.value.record.restart
    assert (restart["phase"], restart["epoch"], restart["batch"], restart["error"]) == ("train", 0, 0, "BackendCompilerFailed")
    assert not runs.exists() or not any(p.is_dir() and not p.name.startswith(".") for p in runs.iterdir())  # never committed: removed


def test_a_backend_failing_at_the_first_call_with_on_failure_eager(tmp_path, broken_backend):
    plain_model, params = job()
    plain = plain_model.train(params, root=tmp_path / "plain")
    model, params = job()
    with pytest.warns(RuntimeWarning, match="BackendCompilerFailed"):
        run = model.train(params, root=tmp_path / "c", compile=nnx.CompileSpec(backend=broken_backend, on_failure="eager"))
    assert run.compile.effective == "eager" and "the backend failed" in run.compile.restart["message"]
    assert run.checkpoint("last").payload()["compile"]["effective"] == "eager"
    # the failed first call ran nothing (the backend refused the graph before it ran): the same run
    assert same_state(model.net.state_dict(), plain_model.net.state_dict()) and run.idps == plain.idps


def test_trainer_refuses_compile_before_anything_is_written(runs):
    x, y = tiny_data()
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3))
    params = nnx.NNTrainerParams(n_epochs=1, optims={"main": nnx.NNOptimParams()}, train_loader=[(x, y)])
    with pytest.raises(nnx.ParamsError, match="compile: a Trainer run"):
        nnx.Trainer(model).train(params, objective=nnx.supervised_objective(), root=runs, compile=EAGER)
    assert not runs.exists()


def _cxx() -> bool:
    return any(shutil.which(c) for c in ("g++", "c++", "clang++"))


@pytest.mark.inductor
@pytest.mark.skipif(not _cxx(), reason="inductor compiles C++ on the CPU; no C++ compiler here")
@pytest.mark.timeout(240)
def test_inductor_makes_one_sgd_step_within_the_float32_rounding_bound(tmp_path):
    """Inductor fuses and reorders the forward's and backward's sums: one plain SGD step over one
    batch must land within the float32 bound of a different summation order (tests/numerics.py)."""
    x, y = tiny_data(n=32)
    sgd = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.5, momentum=0.0, weight_decay=0.0)
    params = nnx.NNTrainParams(n_epochs=1, optim=sgd, train_loader=[(x, y)], val_loader=[(x, y)])

    def fresh():
        torch.manual_seed(0)
        return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))

    eager, compiled = fresh(), fresh()
    before = [p.detach().clone() for p in eager.net.parameters()]
    tol = sgd_step_tolerance(eager.net, lambda net, i: F.cross_entropy(net(x[i : i + 1].double()), y[i : i + 1],
                                                                       reduction="sum") / len(x), x, lr=0.5)
    eager.train(params, root=tmp_path / "eager")
    run = compiled.train(params, root=tmp_path / "inductor", compile=nnx.CompileSpec())
    assert run.compile.effective == "compiled" and run.compile.backend == "inductor"
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(eager.net.parameters(), before, strict=True))
    assert moved > 100 * tol  # the step is far above the rounding it is compared within
    for a, b in zip(compiled.net.parameters(), eager.net.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=0)


def test_every_run_compiles_afresh_so_many_runs_in_one_process_stay_compiled(tmp_path):
    """Dynamo compiles one code object at most 8 times per process and then runs it eagerly
    without a word; runs of nine differently shaped nets must each still compile their forward."""
    from torch._dynamo.utils import counters

    x, y = tiny_data(n=16)
    for width in range(1, 10):
        torch.manual_seed(0)
        model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(width,)))
        compiled_before = counters["stats"]["unique_graphs"]
        run = model.train(nnx.NNTrainParams(n_epochs=1, train_loader=[(x, y)]), root=tmp_path / str(width), compile=EAGER)
        assert run.compile.effective == "compiled"
        assert counters["stats"]["unique_graphs"] > compiled_before, f"width {width}: the forward ran uncompiled"


def test_the_conv_net_compiles_too_and_trains_bit_for_bit_with_the_eager_backend(tmp_path):
    x, y = torch.randn(24, 64, generator=torch.Generator().manual_seed(0)), torch.arange(24) % 3

    def fit(root, compile=None):
        torch.manual_seed(0)
        net = nnx.NNConvParams(input_dim=64, output_dim=3, conv_channels=(2,), kernel_size=3, hidden_dims=(8,))
        model = nnx.NNModel(net, nnx.NNModelParams(net=nnx.Nets.CONV))
        run = model.train(nnx.NNTrainParams(n_epochs=2, seed=0, train_loader=batches(x, y, 8), val_loader=[(x, y)]),
                          root=root, compile=compile)
        return model, run

    plain, _ = fit(tmp_path / "plain")
    compiled, run = fit(tmp_path / "compiled", EAGER)
    assert run.compile.effective == "compiled" and type(compiled.net).__name__ == "ConvNN"
    assert same_state(compiled.net.state_dict(), plain.net.state_dict())


def test_the_record_is_pending_on_disk_until_the_attempt_ends(runs):
    """Admission writes the record as it is before the first compiled call (pending); each
    checkpoint holds it as it is at that commit; metadata.yaml and attempt.json get the final one."""
    seen = {}

    class Look(nnx.Callback):
        def on_epoch_begin(self, ctx):
            if ctx.epoch == 0:
                seen["meta"] = (ctx.run.path / "metadata.yaml").read_text()
                seen["attempt"] = json.loads((ctx.run.path / "attempt.json").read_text())["compile"]["effective"]

    model, params = job(n_epochs=2)
    run = model.train(params, root=runs, callbacks=[Look()], compile=EAGER)
    assert "effective: pending" in seen["meta"] and seen["attempt"] == "pending"
    assert run.checkpoint("first").payload()["compile"]["effective"] == "compiled"
    assert "effective: compiled" in (run.path / "metadata.yaml").read_text()


def test_compile_under_ddp_is_refused_by_the_checks():
    from nnx_api.launch import TrainingEntry
    from nnx_api.training import compilation
    from nnx_api.training.roles import NNMODEL

    model, params = job()
    entry = TrainingEntry(kind=NNMODEL, model=model, params=params, train=params, config={}, optims={}, schedulers={},
                          primary="default", distributed=nnx.distributed.DDP(), compile=EAGER)
    with pytest.raises(nnx.ParamsError, match="compile: .*DDP"):
        compilation.prepare(entry, [])


def test_a_finished_run_is_returned_with_its_recorded_compile_record(runs):
    model, params = job(n_epochs=1)
    first = model.train(params, root=runs, compile=EAGER)
    model, params = job(n_epochs=1)
    again = model.train(params, root=runs, compile=EAGER)  # resume="auto": already finished, nothing trained
    assert again.id == first.id and again.compile == first.compile == nnx.NNRun.load(first.id, runs).compile


@pytest.mark.parametrize("compile_spec", [None, EAGER], ids=["eager", "compiled"])
def test_a_wrong_input_width_is_refused_before_training_as_the_error_torch_would_raise(runs, compile_spec):
    """The forward's own mistake, not a compile failure: refused by the checks before anything is
    written, as the type torch's forward raises (a RuntimeError naming mat1 and mat2)."""
    wide = torch.randn(4, 5)
    with pytest.raises(RuntimeError) as torch_says:
        torch.nn.Linear(4, 3)(wide)  # plain torch: what the forward would have raised mid-run
    model, _ = job()
    params = nnx.NNTrainParams(n_epochs=1, train_loader=[(wide, torch.tensor([0, 1, 2, 0]))])
    with pytest.raises(RuntimeError) as raised:
        model.train(params, root=runs, compile=compile_spec)
    assert not isinstance(raised.value, nnx.CompileError) and isinstance(raised.value, nnx.TrainingInputError)
    assert "mat1 and mat2 shapes cannot be multiplied" in str(torch_says.value) and "mat1 and mat2" in str(raised.value)
    assert "input_dim is 4" in str(raised.value) and not runs.exists()


@pytest.mark.parametrize("compile_spec", [None, nnx.CompileSpec(backend="eager", fullgraph=True, on_failure="eager")],
                         ids=["eager", "restarted"])
def test_a_forward_side_effect_happens_once_per_trained_batch(runs, compile_spec):
    """The checks' probe forward and a failed compiled call both put the net's buffers back: a
    buffer the forward bumps counts the trained batches only (3 batches × 2 epochs), as a plain
    torch loop over the same batches would count."""
    x, y = tiny_data(n=12)
    torch.manual_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)))
    model.net.register_buffer("calls", torch.zeros(()))

    def bump(module, args):
        module.calls += 1
        if compile_spec is not None:
            torch._dynamo.graph_break()  # every compiled call fails under fullgraph: restarted eagerly

    model.net.register_forward_pre_hook(bump)
    params = nnx.NNTrainParams(n_epochs=2, seed=0, train_loader=batches(x, y, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        model.train(params, root=runs, compile=compile_spec)
    assert model.net.calls.item() == 2 * 3
