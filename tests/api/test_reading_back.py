"""Reading back never guesses: a reader given the wrong target says what it was given, what it
wanted, and where the run is when it lies next to what was given (a run folder given as a path
or as the root, a root one level off). Oracle: the folders the test itself made."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import nnx_api as nnx
from nnx_api.runs.journal import migrate_history


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    top = tmp_path_factory.mktemp("reading")
    x, y = torch.randn(32, 4, generator=torch.Generator().manual_seed(0)), torch.arange(32) % 3
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=1, seed=0, train_loader=DataLoader(TensorDataset(x, y), batch_size=8), progress=False)
    run = model.train(params, root=top / "experiments")
    return top, run


def test_a_run_folder_given_as_the_id_names_the_id_and_root(trained):
    top, run = trained
    with pytest.raises(nnx.InvalidRunIdError, match=rf"is a path, not a run id: .* NNRun.load\('{run.id}', root='{top / 'experiments'}'\)"):
        nnx.NNRun.load(str(run.path))


@pytest.mark.parametrize("where", ["top", "missing_child", "run_folder"])
def test_a_root_one_level_off_says_where_the_run_is(trained, where):
    top, run = trained
    root = {"top": top, "missing_child": top / "experiments" / "runs", "run_folder": run.path}[where]
    expected = (rf"is the folder of run {run.id}" if where == "run_folder"
                else rf"but {top / 'experiments'} holds it: pass root='{top / 'experiments'}'")
    with pytest.raises(nnx.RunNotFoundError, match=expected):
        nnx.NNRun.load(run.id, root)
    with pytest.raises(nnx.RunNotFoundError, match=expected):
        nnx.NNModel.from_checkpoint(run.id, root=root)
    with pytest.raises(nnx.RunNotFoundError, match=expected):
        migrate_history(run.id, root)


def test_a_missing_root_and_an_unrelated_one_are_said_as_such(trained, tmp_path):
    _top, run = trained
    with pytest.raises(nnx.RunNotFoundError, match="that folder does not exist; pass the root the run was trained with"):
        nnx.NNRun.load(run.id, tmp_path / "nowhere" / "deeper")
    unrelated = tmp_path / "isolated" / "empty"  # nothing beside it holds the run (other tests' folders would)
    unrelated.mkdir(parents=True)
    with pytest.raises(nnx.RunNotFoundError, match="list runs with `nnx runs list`"):
        nnx.NNRun.load(run.id, unrelated)


def test_load_pretrained_given_a_folder_says_it_reads_one_file(trained):
    top, run = trained
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3), nnx.NNModelParams())
    with pytest.raises(nnx.ParamsError, match=rf"is a folder; load_pretrained reads one file .* NNModel.from_checkpoint\('{run.id}'"):
        model.load_pretrained(run.path)
    with pytest.raises(nnx.ParamsError, match=r"is a folder; load_pretrained reads one file \(a state dict saved with torch.save, or a .safetensors file\)'?$"):
        model.load_pretrained(top)


def _copy_of(run, tmp_path):
    """The run's folder copied under a root of this test's own (the module's run stays as trained)."""
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(run.path, root / run.id)
    return root


def test_run_idps_equal_a_list_of_the_same_records_and_stay_read_only(trained):
    _top, run = trained
    loaded = nnx.NNRun.load(run.id, run.root)
    records = [*loaded.idps]  # a plain list of the records, built here
    assert len(records) == 4  # 32 samples in batches of 8, one epoch
    assert loaded.idps == records and loaded.idps == tuple(records) and not loaded.idps != records
    assert loaded.idps != records[:-1] and loaded.idps != [*records, records[0]]
    assert nnx.NNRun(config=loaded.config, root=run.root).idps == []  # no records: NNx's `run.idps == []`
    with pytest.raises(AttributeError):
        loaded.idps.append(records[0])


def test_with_idps_is_a_copy_and_a_load_shows_only_what_last_committed(trained, tmp_path):
    import dataclasses

    _top, run = trained
    root = _copy_of(run, tmp_path)
    loaded = nnx.NNRun.load(run.id, root)
    committed = [*loaded.idps]
    speculative = dataclasses.replace(committed[-1], epoch_idx=99, iter_idx=999)  # an epoch LAST never committed
    longer = loaded.with_idps([*committed, speculative])
    assert loaded.idps == committed and longer.idps == [*committed, speculative] and longer.id == loaded.id
    longer.save(update_best=False)
    again = nnx.NNRun.load(run.id, root)
    assert again.idps == committed  # the one epoch trained (0): the record of epoch 99 is past LAST
    with pytest.raises(nnx.ParamsError, match="NNRun.with_idps: takes IterationDataPoints, got dict"):
        loaded.with_idps([{"epoch_idx": 0}])


def test_an_empty_history_under_a_committed_last_is_refused_naming_the_file(trained, tmp_path):
    _top, run = trained
    root = _copy_of(run, tmp_path)
    history = root / run.id / "idps.csv"
    history.write_bytes(b"")  # truncated outside any writer: not even the header is left
    with pytest.raises(nnx.CorruptRunError, match=r"idps.csv\) is empty, though LAST committed epoch 0"):
        nnx.NNRun.load(run.id, root)
    history.unlink()  # deleted on purpose: the run loads without records, with a warning
    with pytest.warns(RuntimeWarning, match=r"idps.csv\) is missing"):
        assert nnx.NNRun.load(run.id, root).idps == []
