"""The rules every reader of runs follows for the whole class of a wrong argument, whatever the
entry point (``NNRun.load``, ``NNRun.all``, ``NNModel.from_checkpoint``, ``NNCheckpoint.load``,
``load_pretrained``, ``to_onnx``): a run id and a root swapped, a root given where the tag
belongs, a run object where its id belongs, a hex id in capitals, a root anywhere inside a run's
folder, a run's own file given as weights, an example input ``predict`` would refuse. Each is a
typed error saying what was given and the call to make instead, raised before anything is read
or written. Oracle: the folders and the run the test itself made."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch import nn

import nnx_api as nnx

from tests.api.tiny import batches, tiny_data


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``(root, run)``: one committed 1-epoch run under ``<top>/runs``."""
    root = tmp_path_factory.mktemp("reading-rules") / "runs"
    x, y = tiny_data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=1, seed=0, train_loader=batches(x, y, 16), progress=False)
    return root, model.train(params, root=root)


def fresh_model() -> nnx.NNModel:
    return nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())


# -- a path where the id or the tag belongs ----------------------------------------------------------


def test_an_id_and_a_root_swapped_are_said_as_swapped(trained):
    root, run = trained
    with pytest.raises(nnx.InvalidRunIdError, match=rf"arguments are swapped.*NNRun.load\('{run.id}', root='{root}'\)"):
        nnx.NNRun.load(str(root), run.id)
    with pytest.raises(nnx.InvalidRunIdError, match=rf"swapped.*NNModel.from_checkpoint\('{run.id}', root='{root}'\)"):
        nnx.NNModel.from_checkpoint(str(root), run.id)


def test_a_root_given_where_the_tag_belongs_says_root_is_keyword_only(trained):
    root, run = trained
    expected = rf"checkpoint tag '{root}' is a path: .*root is keyword-only: NNModel.from_checkpoint\('{run.id}', root='{root}'\)"
    with pytest.raises(nnx.InvalidRunIdError, match=expected):
        nnx.NNModel.from_checkpoint(run.id, str(root))
    with pytest.raises(nnx.InvalidRunIdError, match=rf"NNCheckpoint.load\('{run.id}', root='{root}'\)"):
        nnx.NNCheckpoint.load(run.id, str(root))
    with pytest.raises(nnx.InvalidRunIdError, match="is a path: a tag is a name such as 'best'"):
        run.checkpoint(str(root))


# -- what stands for an id ---------------------------------------------------------------------------


def test_a_run_stands_for_its_id_and_another_object_is_named_by_its_type(trained):
    root, run = trained
    assert nnx.NNRun.load(run, root).id == run.id
    assert nnx.NNRun.load(run).id == run.id  # its own root
    assert nnx.NNModel.from_checkpoint(run, root=root) is not None
    with pytest.raises(nnx.InvalidRunIdError, match=r"got a NNModel \(") as caught:
        nnx.NNRun.load(fresh_model(), root)
    assert len(str(caught.value)) < 200 and "NNModelParams(" not in str(caught.value)

    class Handle:
        id = run.id

    with pytest.raises(nnx.InvalidRunIdError, match=r"got a Handle: pass run.id$"):
        nnx.NNRun.load(Handle(), root)


def test_a_hex_id_matches_in_any_case_everywhere(trained):
    root, run = trained
    assert nnx.NNRun.load(run.id.upper(), root).id == run.id
    assert nnx.NNRun.load(run.id[:8].upper(), root).id == run.id
    assert nnx.NNCheckpoint.load(run.id[:8].upper(), "last", root).run_id == run.id
    assert nnx.NNModel.from_checkpoint(run.id[:8].upper(), root=root) is not None


# -- a root anywhere inside a run's folder --------------------------------------------------------------


@pytest.mark.parametrize("depth", ["checkpoints", "checkpoints/deeper/still"])
def test_a_root_inside_a_run_folder_at_any_depth_names_the_root(trained, depth):
    root, run = trained
    given = run.path / depth
    expected = rf"is inside the folder of run {run.id}; .*root='{root}'"
    with pytest.raises(nnx.RunNotFoundError, match=expected):
        nnx.NNRun.load(run.id, given)
    with pytest.raises(nnx.RunNotFoundError, match=expected):
        nnx.NNModel.from_checkpoint(run.id, root=given)


@pytest.mark.parametrize("where", ["run folder", "inside it"])
def test_all_over_a_run_folder_names_the_root_instead_of_listing_nothing(trained, tmp_path, where):
    root, run = trained
    given = run.path if where == "run folder" else run.path / "checkpoints"
    with pytest.raises(nnx.RunNotFoundError, match=rf"the folder of run {run.id}, not a runs root.*root='{root}'") as caught:
        nnx.NNRun.all(given)
    again = pickle.loads(pickle.dumps(caught.value))  # the hint the CLI renders travels with the error
    assert str(again) == str(caught.value) and again.where == caught.value.where
    assert [r.id for r in nnx.NNRun.all(root)] == [run.id]
    assert nnx.NNRun.all(tmp_path) == []


# -- load_pretrained given a run's own file --------------------------------------------------------------


def test_load_pretrained_given_a_tag_file_says_from_checkpoint_not_corrupt(trained, tmp_path):
    root, run = trained
    model = fresh_model()
    expected = rf"is run {run.id}'s 'last' tag file, not a state dict; .*NNModel.from_checkpoint\('{run.id}', 'last', root='{root}'\)"
    with pytest.raises(nnx.ParamsError, match=expected):
        model.load_pretrained(run.path / "checkpoints" / "last.json")
    with pytest.raises(nnx.ParamsError, match=rf"is a file of run {run.id} \(run.yaml\)"):
        model.load_pretrained(run.path / "run.yaml")
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    with pytest.raises(nnx.ParamsError, match=r"is a .json file, not a state dict"):
        model.load_pretrained(notes)


# -- to_onnx checks its path and its example as predict checks its inputs ------------------------------------


def test_to_onnx_refuses_a_folder_and_an_example_predict_would_refuse(tmp_path):
    model = fresh_model()
    with pytest.raises(nnx.ParamsError, match=rf"to_onnx\(path=...\): {tmp_path} is a folder: name a file, e.g. .*model.onnx"):
        model.to_onnx(tmp_path, torch.randn(1, 4))
    with pytest.raises(nnx.ParamsError, match=r"to_onnx\(example_input=...\): it has shape \[1, 5\], but NNParams.input_dim is 4"):
        model.to_onnx(tmp_path / "m.onnx", torch.randn(1, 5))
    with pytest.raises(nnx.ParamsError, match=r"to_onnx\(example_input=...\): it is torch.float64 .* x.float\(\)"):
        model.to_onnx(tmp_path / "m.onnx", torch.randn(1, 4, dtype=torch.double))
    with pytest.raises(nnx.ParamsError, match=r"is a Python list of numbers; pass a tensor"):
        model.to_onnx(tmp_path / "m.onnx", [0.1, 0.2, 0.3, 0.4])
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_to_onnx_names_the_example_when_the_forward_fails(tmp_path):
    pytest.importorskip("onnx")

    class Picky(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 3)

        def forward(self, x):
            return self.layer(x[:, :3])  # a forward that cannot take what it is given

    model = nnx.NNModel(module=Picky())
    with pytest.raises(nnx.ParamsError, match=r"the net's forward fails on example_input \[2, 4\] torch.float32 \(RuntimeError"):
        model.to_onnx(tmp_path / "m.onnx", torch.randn(2, 4))
    assert not (tmp_path / "m.onnx").exists()


# -- an edited run.yaml ------------------------------------------------------------------------------


def _edited_copy(trained, tmp_path, part: str, field: str, value) -> str:
    """A copy of the trained run under ``tmp_path`` whose run.yaml has ``part.field`` set to ``value``."""
    import shutil

    from nnx_api.runs.store import dump_yaml, load_yaml

    root, run = trained
    shutil.copytree(root / run.id, tmp_path / run.id)
    path = tmp_path / run.id / "run.yaml"
    doc = load_yaml(path.read_bytes(), where="test")
    doc[part][field] = value
    path.write_bytes(dump_yaml(doc))
    return run.id


def test_an_edited_run_yaml_is_refused_naming_the_field_its_own_checks_refuse(trained, tmp_path):
    run_id = _edited_copy(trained, tmp_path, "train", "n_epochs", 1.5)
    with pytest.raises(nnx.CorruptRunError, match=rf"run {run_id}: run.yaml's configuration hashes to [0-9a-f]+, "
                       rf"not {run_id}; it fails its own checks: train: NNTrainParams.n_epochs: must be an integer"):
        nnx.NNRun.load(run_id, root=tmp_path)
    with pytest.raises(nnx.ParamsError, match="n_epochs"):  # the same check a hand-built one meets
        nnx.NNTrainParams(n_epochs=1.5)


def test_an_edit_its_checks_accept_is_still_refused_by_the_hash_alone(trained, tmp_path):
    run_id = _edited_copy(trained, tmp_path, "train", "n_epochs", 2)
    with pytest.raises(nnx.CorruptRunError, match=rf"hashes to [0-9a-f]+, not {run_id}$"):
        nnx.NNRun.load(run_id, root=tmp_path)


def test_every_kind_of_saved_configuration_reads_back_through_its_checks(trained, runs):
    from nnx_api.runs.hints import edited_fields

    from tests.api.tiny import two_part_model

    x, y = tiny_data()
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0)
    trainer = nnx.Trainer(two_part_model()).train(
        nnx.NNTrainerParams(n_epochs=1, optims={"all": optim}, train_loader=batches(x, y, 16), progress=False),
        objective=nnx.supervised_objective(), root=runs)
    module = nnx.NNModel(module=nn.Linear(4, 3)).train(nnx.NNTrainParams(n_epochs=1, train_loader=batches(x, y, 16),
                                                                  progress=False), root=runs)
    for run in (trained[1], trainer, module):  # an unedited configuration has nothing to say
        assert edited_fields(run) == "", run.config
