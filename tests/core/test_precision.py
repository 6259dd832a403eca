"""``ResolvedPrecision``: the record of a requested and an effective precision (module docstring
of ``nnx_core.precision``): modes and sources are checked, a fallback is what differs, the plain
record keeps ``fallback_reason`` only when there is one and rebuilds the same record; a run scopes
it to the surfaces it applied it to; what needs torch is asked of the registered runtime."""

from __future__ import annotations

import contextlib

import pytest

from nnx_core import precision
from nnx_core.errors import ParamsError
from nnx_core.precision import ResolvedPrecision, run_surfaces


def test_fell_back_is_exactly_effective_differing_from_requested():
    assert ResolvedPrecision("fp16", "fp32", "cpu", "mixed_precision", "fp16 needs CUDA").fell_back
    assert not ResolvedPrecision("bf16", "bf16", "cpu", "policy").fell_back
    assert not ResolvedPrecision("fp32", "fp32", "cuda").fell_back


def test_source_defaults_to_default_and_the_reason_to_none():
    record = ResolvedPrecision("fp32", "fp32", "cpu")
    assert record.source == "default" and record.fallback_reason is None


@pytest.mark.parametrize(
    ("args", "field", "bad"),
    [
        (("fp8", "fp32", "cpu"), "requested", "'fp8'"),
        (("fp32", "half", "cpu"), "effective", "'half'"),
        (("fp32", "fp32", "cpu", "flag"), "source", "'flag'"),
    ],
)
def test_modes_and_sources_outside_their_choices_are_refused_naming_the_field(args, field, bad):
    with pytest.raises(ParamsError) as info:
        ResolvedPrecision(*args)
    assert info.value.path == f"ResolvedPrecision.{field}"
    assert bad in str(info.value)


def test_every_mode_and_source_is_accepted():
    for mode in ("fp32", "fp16", "bf16"):
        assert ResolvedPrecision(mode, mode, "cpu").effective == mode
    for source in ("default", "policy", "mixed_precision"):
        assert ResolvedPrecision("fp32", "fp32", "cpu", source).source == source


def test_state_keeps_the_reason_only_after_a_fallback_and_rebuilds_the_same_record():
    plain = ResolvedPrecision("bf16", "bf16", "cuda", "policy")
    assert plain.state() == {"requested": "bf16", "effective": "bf16", "device_type": "cuda", "source": "policy"}
    fell = ResolvedPrecision("fp16", "fp32", "cpu", "mixed_precision", "fp16 needs CUDA")
    assert fell.state() == {
        "requested": "fp16", "effective": "fp32", "device_type": "cpu", "source": "mixed_precision",
        "fallback_reason": "fp16 needs CUDA",
    }
    for record in (plain, fell):
        assert ResolvedPrecision.from_state(record.state()) == record


def test_an_older_record_without_source_or_reason_reads_as_default():
    record = ResolvedPrecision.from_state({"requested": "fp32", "effective": "fp32", "device_type": "cpu"})
    assert record == ResolvedPrecision("fp32", "fp32", "cpu", "default", None)


def test_coerce_takes_a_record_a_mapping_or_none():
    record = ResolvedPrecision("fp16", "fp32", "cpu", "policy", "fp16 needs CUDA")
    assert ResolvedPrecision.coerce(None) is None
    assert ResolvedPrecision.coerce(record) is record
    assert ResolvedPrecision.coerce(record.state()) == record


# --- what a run applied it to, and what the runtime builds ------------------------------------------

TRAIN, TRAINER_OBJECTIVE, EVALUATE, PREDICT = (
    "NNModel.train (default step and objectives)", "Trainer.train(objective=...)", "evaluate()",
    "predict() / predict_proba()",
)  # NNx 0.4.1's names of the surfaces (nnx.precision)


def test_a_record_covers_every_surface_until_a_run_scopes_it():
    record = ResolvedPrecision("bf16", "bf16", "cpu", "policy")
    assert record.covers is None and record.applies_to == (TRAIN, TRAINER_OBJECTIVE, EVALUATE, PREDICT)
    scoped = record.scoped([EVALUATE, PREDICT])
    assert scoped.covers == (EVALUATE, PREDICT) and scoped != record and record.covers is None
    assert hash(scoped) == hash(record.scoped((EVALUATE, PREDICT)))


def test_state_keeps_covers_only_once_scoped_and_rebuilds_it():
    record = ResolvedPrecision("bf16", "bf16", "cpu", "policy")
    assert "covers" not in record.state()  # an unscoped record's state is what it always was
    scoped = record.scoped((TRAIN, EVALUATE, PREDICT))
    assert scoped.state()["covers"] == [TRAIN, EVALUATE, PREDICT]
    assert ResolvedPrecision.from_state(scoped.state()) == scoped


@pytest.mark.parametrize(
    ("trainer", "step_function", "expected"),
    [
        (False, False, (TRAIN, EVALUATE, PREDICT)),
        (False, True, (EVALUATE, PREDICT)),
        (True, False, (TRAINER_OBJECTIVE, EVALUATE, PREDICT)),
        (True, True, (EVALUATE, PREDICT)),
    ],
)
def test_a_run_claims_training_only_where_the_framework_runs_the_step(trainer, step_function, expected):
    assert run_surfaces(trainer=trainer, step_function=step_function) == expected


@pytest.mark.parametrize(
    ("effective", "reduced", "scaler", "dtype"),
    [("fp32", False, False, None), ("bf16", True, False, "bfloat16"), ("fp16", True, True, "float16")],
)
def test_the_record_names_the_autocast_dtype_and_the_scaler(effective, reduced, scaler, dtype):
    record = ResolvedPrecision(effective, effective, "cuda", "policy")
    assert (record.reduced, record.uses_scaler) == (reduced, scaler)
    shown = record.record()
    assert (shown["autocast_dtype"], shown["grad_scaler"], shown["fallback_reason"]) == (dtype, scaler, None)
    assert shown["not_covered"] == ["nnx.lr_finder", "nnx.diffusion.sampling", "generation"]
    assert ResolvedPrecision.from_record(shown) == record.scoped(record.applies_to)  # a record lists what it covers


class FakeRuntime:
    """Stands in for the torch runtime: names what it was asked for."""

    def dtype(self, name):
        return f"dtype:{name}"

    def autocast(self, device_type, name):
        return contextlib.nullcontext(f"autocast:{device_type}:{name}")

    def scaler(self, device_type):
        return f"scaler:{device_type}"

    def output(self, tensor):
        return f"full:{tensor}"

    def tf32(self):
        return {"cuda_matmul": True, "cudnn_conv": False}


def test_what_needs_the_framework_is_asked_of_the_registered_runtime(monkeypatch):
    monkeypatch.setattr(precision, "_runtimes", [])
    bf16, fp16, fp32 = (ResolvedPrecision(m, m, "cuda", "policy") for m in ("bf16", "fp16", "fp32"))
    assert bf16.tf32 == {"cuda_matmul": None, "cudnn_conv": None, "cudnn_rnn": None}  # nothing to read it with
    with pytest.raises(RuntimeError, match="needs a precision runtime"):
        _ = bf16.autocast_dtype
    precision.register_precision_runtime(FakeRuntime())
    assert (bf16.autocast_dtype, fp16.autocast_dtype, fp32.autocast_dtype) == ("dtype:bfloat16", "dtype:float16", None)
    with bf16.autocast() as entered, fp32.autocast() as plain:
        assert (entered, plain) == ("autocast:cuda:bfloat16", None)
    assert (fp16.build_scaler(), bf16.build_scaler(), fp32.build_scaler()) == ("scaler:cuda", None, None)
    assert (bf16.output("t"), fp32.output("t")) == ("full:t", "t")
    assert bf16.record()["tf32"] == {"cuda_matmul": True, "cudnn_conv": False, "cudnn_rnn": None}
