"""The checkpoint payload class (nnx_api.runs.payload): one typed value for what a checkpoint
blob holds, converted by the one converter, its saved states handed through as they are, the
keys written as they always were (so checkpoints written before the class load unchanged)."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from nnx_core.errors import CorruptRunError
from nnx_adapters.pytorch import state as torch_state
import nnx_api as nnx
from nnx_api.runs.payload import DDP_KIND, CheckpointPayload, WeightsPayload, decode_payload, decode_standalone, read_payload

from tests.api.tiny import batches, tiny_data, two_part_model

NNMODEL_KEYS = ["kind", "epoch", "weights", "optimizer", "schedule", "rng", "components", "optional_components",
                "update_count", "transforms"]
TRAINER_KEYS = ["kind", "epoch", "weights", "optimizer", "schedule", "optimizers", "schedules", "update_counts", "rng",
                "components", "optional_components", "update_count", "transforms"]


def weights() -> dict:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).state_dict()  # an OrderedDict with _metadata


def nnmodel_dict(sd=None) -> dict:
    """A stateful NNModel payload in the exact shape (keys and order) ``TrainingSession`` writes."""
    return {
        "kind": "nnmodel",
        "epoch": 2,
        "weights": weights() if sd is None else sd,
        "optimizer": {"type": "SGD", "topology": [["0.weight"]], "state": {"state": {}, "param_groups": []}},
        "schedule": {"type": "StepLR", "state": {"last_epoch": 3}},
        "rng": {"torch": torch.get_rng_state(), "loaders": []},
        "components": {"nnx.monitor": {"best": 0.5, "best_epoch": 1}},
        "optional_components": ["nnx.early_stopping"],
        "update_count": 12,
        "transforms": [{"name": "zero_first_bias", "version": 1}],
    }


def trainer_dict() -> dict:
    """A Trainer's payload as written today: the placeholders, then the named states."""
    base = nnmodel_dict()
    named = {
        "optimizer": {"type": "nnx.Trainer", "topology": None, "names": ["encoder", "head"]},
        "schedule": {"type": "nnx.Trainer"},
        "optimizers": {"encoder": {"type": "SGD"}, "head": {"type": "Adam"}},
        "schedules": {"encoder": {"type": "StepLR"}, "head": {"type": "StepLR"}},
        "update_counts": {"encoder": 4, "head": 4},
    }
    return {k: named.get(k, base.get(k)) for k in TRAINER_KEYS} | {"kind": "trainer"}


def ddp_dict() -> dict:
    """A distributed payload: every rank's RNG streams, then the ``distributed`` record and ``compile``."""
    base = nnmodel_dict()
    return {**base, "kind": DDP_KIND, "rng": {"ranks": [{"r": 0}, {"r": 1}]},
            "distributed": {"world_size": 2, "writer_rank": 0, "partitions": [{"rank": 0}, {"rank": 1}]},
            "compile": {"status": "eager"}}


@pytest.mark.parametrize("shape", [nnmodel_dict, trainer_dict, ddp_dict])
def test_a_dict_in_todays_shape_round_trips_key_for_key_and_object_for_object(shape):
    written = shape()
    payload = read_payload(written, "run abc tag 'last'")
    assert isinstance(payload, CheckpointPayload) and payload.stateful
    state = payload.state()
    assert list(state) == list(written)  # the same keys, in the same order
    assert state == written
    for key in ("weights", "optimizer", "schedule", "rng", "components"):
        assert state[key] is written[key]  # saved states pass through, never rebuilt
    assert read_payload(state, "again") == payload


def test_the_decoded_blob_with_its_format_key_reads_and_writes_the_same_bytes():
    written = nnmodel_dict()
    blob = torch_state.encode(written)
    payload = decode_payload(blob, "run abc tag 'last'")
    again = torch_state.decode(torch_state.encode(payload.state()))
    assert list(again) == ["nnx_payload_format", *NNMODEL_KEYS]
    assert again["optional_components"] == ["nnx.early_stopping"] and again["transforms"] == written["transforms"]


def test_a_checkpoint_written_before_optional_components_existed_loads():
    old = {k: v for k, v in nnmodel_dict().items() if k != "optional_components"}
    payload = read_payload(old, "old")
    assert payload.optional_components == ()
    assert list(payload.state()) == NNMODEL_KEYS and payload.state()["optional_components"] == []


def test_the_state_dicts_metadata_survives_the_class_and_the_codec():
    sd = weights()
    assert hasattr(sd, "_metadata")
    payload = read_payload(nnmodel_dict(sd), "here")
    assert payload.weights is sd and payload.state()["weights"] is sd
    loaded = decode_payload(torch_state.encode(payload.state()), "blob")
    assert type(loaded.weights) is type(sd)
    assert loaded.weights._metadata == sd._metadata  # type: ignore[union-attr]
    nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).load_state_dict(loaded.weights)


def test_the_encoder_writes_what_encode_writes():
    payload = read_payload(ddp_dict(), "here")
    sink = io.BytesIO()
    payload.encoder()(sink)
    assert decode_payload(sink.getvalue(), "sink").state().keys() == ddp_dict().keys()


def test_the_weights_only_form():
    sd = weights()
    payload = WeightsPayload(epoch=3, weights=sd)
    assert not payload.stateful and list(payload.state()) == ["kind", "epoch", "weights"]
    read = decode_payload(payload.encode(), "run abc tag 'snap'")
    assert isinstance(read, WeightsPayload) and read.epoch == 3 and read.weights._metadata == sd._metadata  # type: ignore[union-attr]
    with pytest.raises(CorruptRunError, match="weights-only payload has kind"):
        WeightsPayload(kind="nnmodel", epoch=0, weights=sd)


def test_the_typed_readers():
    nnmodel = read_payload(nnmodel_dict(), "a")
    assert nnmodel.named_state()[0] == {"default": nnmodel.optimizer} and nnmodel.named_state()[2] is None
    assert nnmodel.distributed_state() is None
    trainer = read_payload(trainer_dict(), "b")
    opts, scheds, counts = trainer.named_state()
    assert set(opts) == set(scheds) == {"encoder", "head"} and counts == {"encoder": 4, "head": 4}
    ddp = read_payload(ddp_dict(), "c")
    assert ddp.distributed_state()["world_size"] == 2
    assert ddp.rank_view(1).rng == {"r": 1} and ddp.rank_view(1).weights is ddp.weights
    view = nnmodel.training_state()
    assert "weights" not in view and view["completed_epoch"] == 2 and view["scheduler"] is nnmodel.schedule
    assert list(view)[:3] == ["kind", "epoch", "optimizer"]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: {**d, "surprise": 1}, "unknown field 'surprise'"),
        (lambda d: {k: v for k, v in d.items() if k != "rng"}, "CheckpointPayload.rng: required field missing"),
        (lambda d: {k: v for k, v in d.items() if k != "kind"}, "CheckpointPayload.kind: required field missing"),
        (lambda d: {**d, "optimizers": {"a": {}}}, "both 'optimizers' and 'schedules'"),
        (lambda d: ["not", "a", "mapping"], "is a mapping, got list"),
    ],
)
def test_an_unknown_or_missing_key_is_refused_naming_the_checkpoint(change, says):
    with pytest.raises(CorruptRunError, match="^run abc tag 'last': ") as info:
        read_payload(change(nnmodel_dict()), "run abc tag 'last'")
    assert says in str(info.value)


def test_a_weights_only_payload_with_training_state_is_refused():
    with pytest.raises(CorruptRunError, match="WeightsPayload: unknown field 'components', 'optimizer'"):
        read_payload({**nnmodel_dict(), "kind": "weights"}, "run abc tag 'snap'")


def sgd(pattern):
    return nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, param_groups=[nnx.NNParamGroupSpec(name_pattern=pattern)])


def test_what_training_writes_is_what_the_class_reads(runs):
    x, y = tiny_data(n=24)
    run = nnx.Trainer(two_part_model()).train(
        nnx.NNTrainerParams(n_epochs=1, optims={part: sgd(f"{part}.*") for part in ("encoder", "head")},
                            train_loader=batches(x, y, 8)),
        objective=nnx.supervised_objective(), root=runs,
    )
    last = run.checkpoint("last")
    written = last.payload()  # the public view stays the decoded mapping
    assert list(written) == ["nnx_payload_format", *TRAINER_KEYS]
    assert isinstance(last.contents(), CheckpointPayload) and last.contents().kind == "trainer"
    contents = read_payload(written, "last")
    assert contents.state() == {k: v for k, v in written.items() if k != "nnx_payload_format"}
    assert hasattr(contents.weights, "_metadata")
    assert contents.named_state()[2] == {"encoder": 3, "head": 3}


def test_a_standalone_file_in_its_written_shape_reads_back_and_another_kind_is_refused(tmp_path):
    """The standalone ``NNCheckpoint.to_file`` form: the keys it has always written read back
    (optional ones None), and a run's checkpoint blob is not mistaken for one."""
    written = {
        "kind": "nnx.checkpoint", "net_params": None, "net_state": weights(),
        "model_params": nnx.NNModelParams().state(), "idp": None, "transforms": [], "run_id": None, "tag": None,
        "epoch": None, "module_signature": None,
    }
    saved = decode_standalone(torch_state.encode(written), "f.nnx")
    assert list(saved.state()) == list(written) and saved.net_state is not None
    assert hasattr(saved.net_state, "_metadata")
    with pytest.raises(CorruptRunError, match=r"f.nnx: not an NNCheckpoint file \(kind 'nnmodel'\)"):
        decode_standalone(torch_state.encode(nnmodel_dict()), "f.nnx")
    with pytest.raises(CorruptRunError, match="f.nnx: not a readable NNCheckpoint file"):
        decode_standalone(torch_state.encode({**written, "extra": 1}), "f.nnx")
