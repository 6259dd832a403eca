"""The rules ``nnx``'s command line follows for the whole class of a mistake, whatever the
command: its messages speak the command line (a hint the readers build for Python, ``root=...``
or ``NNRun.load(...)``, is said as ``nnx runs <command> ID --root DIR``); a stray folder is asked
about as ``--root``; a suggested output file has a suffix its writer takes; PyTorch's names of
configuration fields are answered with NNx's; a hex id matches in any case. Oracle: the folders
and the run the test itself made."""

from __future__ import annotations

from pathlib import Path

import pytest

import nnx_api as nnx
from nnx_api.cli import main

from tests.api.tiny import committed_run

COMMANDS = ("show", "verify", "plot", "compare")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, str]:
    """``<top>/experiments`` holding one committed 1-epoch run (``<top>/runs`` does not exist)."""
    root = tmp_path_factory.mktemp("cli-rules") / "experiments"
    return root, committed_run(root, n_epochs=1)


def cli(capsys, *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return code, captured.out, captured.err


def speaks_cli(err: str) -> bool:
    return "root=" not in err and "NNRun." not in err and "NNModel." not in err


# -- hints in the command line's words ------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("where", ["run folder", "inside it", "one level up"])
def test_a_root_that_is_off_is_answered_with_the_command_to_type(runs, capsys, command, where):
    root, rid = runs
    given = {"run folder": root / rid, "inside it": root / rid / "checkpoints", "one level up": root.parent}[where]
    code, _, err = cli(capsys, "runs", command, rid[:8], "--root", given)
    assert code == 1 and speaks_cli(err), err
    assert f"nnx runs {command} {rid if where != 'one level up' else rid[:8]} --root {root}" in err, err


def test_a_missing_default_root_finds_the_root_beside_it(runs, capsys, monkeypatch):
    root, rid = runs
    monkeypatch.chdir(root.parent)  # ./runs does not exist; ./experiments holds the run
    monkeypatch.delenv("NNX_RUNS", raising=False)
    code, _, err = cli(capsys, "runs", "show", rid[:8])
    assert code == 1 and speaks_cli(err) and f"nnx runs show {rid[:8]} --root experiments" in err, err


def test_a_missing_root_says_the_option_to_pass(runs, capsys, tmp_path):
    _, rid = runs
    code, _, err = cli(capsys, "runs", "show", rid[:8], "--root", tmp_path / "nowhere")
    assert code == 1 and speaks_cli(err) and f"nnx runs show {rid[:8]} --root DIR (or set $NNX_RUNS)" in err, err


@pytest.mark.parametrize("command", ("show", "verify", "plot"))
def test_a_run_folder_given_as_the_id_is_answered_with_the_id_and_root(runs, capsys, command):
    root, rid = runs
    code, _, err = cli(capsys, "runs", command, root / rid)
    assert code == 2 and speaks_cli(err) and f"nnx runs {command} {rid} --root {root}" in err, err


def test_list_over_a_run_folder_speaks_cli(runs, capsys):
    root, rid = runs
    code, out, err = cli(capsys, "runs", "list", "--root", root / rid)
    assert code == 1 and out == "" and speaks_cli(err) and f"the folder of run {rid}" in err and f"--root {root}" in err


# -- arguments -------------------------------------------------------------------------------------------


def test_a_stray_folder_is_asked_about_as_root(runs, capsys, tmp_path):
    root, rid = runs
    code, _, err = cli(capsys, "runs", "list", root)
    assert code == 2 and f"did you mean --root {root}?" in err
    code, _, err = cli(capsys, "runs", "show", rid[:8], root)
    assert code == 2 and f"did you mean --root {root}?" in err
    code, _, err = cli(capsys, "runs", "list", tmp_path / "not-there")
    assert code == 2 and "did you mean" not in err  # not a folder: no guess


def test_a_suggested_output_file_has_a_suffix_its_writer_takes(runs, capsys, tmp_path):
    root, rid = runs
    code, _, err = cli(capsys, "runs", "export", rid[:8], tmp_path, "--root", root)
    assert code == 2 and f"{tmp_path / 'model.safetensors'} or {tmp_path / 'model.onnx'}" in err, err
    code, _, err = cli(capsys, "runs", "plot", rid[:8], "-o", tmp_path, "--root", root)
    assert code == 2 and f"{tmp_path / (rid[:8] + '.png')}" in err, err
    assert list(tmp_path.iterdir()) == []


def test_pytorch_names_of_fields_are_answered_with_nnxs(runs, capsys):
    root, _ = runs
    code, _, err = cli(capsys, "runs", "list", "--where", "lr=0.01", "--root", root)
    assert code == 2 and "PyTorch's 'lr' is max_lr here: --where max_lr=" in err, err
    code, _, err = cli(capsys, "runs", "list", "--where", "train.epochs=1", "--root", root)
    assert code == 2 and "--where n_epochs=" in err, err
    code, _, err = cli(capsys, "runs", "list", "--sort", "lr", "--root", root)
    assert code == 2 and "--where max_lr=VALUE" in err, err


def test_a_hex_id_matches_in_any_case(runs, capsys):
    root, rid = runs
    code, out, _ = cli(capsys, "runs", "show", rid[:8].upper(), "--root", root)
    assert code == 0 and f"run {rid}" in out
    code, out, _ = cli(capsys, "runs", "verify", rid.upper(), "--root", root)
    assert code == 0 and "OK" in out


def test_the_same_errors_keep_speaking_python_in_python(runs):
    root, rid = runs
    with pytest.raises(nnx.RunNotFoundError, match=rf"root='{root}'"):
        nnx.NNRun.load(rid, root / rid)

