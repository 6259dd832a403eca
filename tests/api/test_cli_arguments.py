"""The mistakes a user makes on ``nnx``'s command line: a path one level off or of the wrong kind,
an id with a typo, a value of the wrong kind, another tool's name for an option, an output that
exists. Each exits non-zero with at most two lines saying what was given, what was wanted and what
to do: never a traceback, never a silent success doing the wrong thing."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnx_api.cli import main

from tests.api.tiny import committed_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, str]:
    """``<top>/runs`` holding one committed 2-epoch run."""
    root = tmp_path_factory.mktemp("cli-arguments") / "runs"
    return root, committed_run(root, n_epochs=2)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) <= 2, captured.err
    return code, captured.out, captured.err


# -- paths ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["run folder", "inside a run folder"])
def test_list_with_a_run_folder_as_the_root_names_the_root(runs, capsys, where):
    root, rid = runs
    given = root / rid if where == "run folder" else root / rid / "checkpoints"
    code, out, err = cli(capsys, "runs", "list", "--root", given)
    assert code != 0 and out == ""
    assert f"the folder of run {rid}" in err and f"--root {root}" in err


def test_list_with_a_root_one_level_up_says_which_folder_holds_the_runs(runs, capsys):
    root, _ = runs
    code, out, err = cli(capsys, "runs", "list", "--root", root.parent)
    assert code != 0 and out == "" and f"pass --root {root}" in err


@pytest.mark.parametrize("where", ["one level up", "run folder", "missing"])
def test_show_with_a_root_that_is_off_says_where_the_run_is(runs, capsys, tmp_path, where):
    root, rid = runs
    given = {"one level up": root.parent, "run folder": root / rid, "missing": tmp_path / "nowhere"}[where]
    expected = {"one level up": f"but {root} holds it", "run folder": f"is the folder of run {rid}",
                "missing": "that folder does not exist"}[where]
    for command in ("show", "verify", "plot", "compare"):
        code, out, err = cli(capsys, "runs", command, rid[:8], "--root", given)
        assert code == 1 and expected in err, (command, err)


def test_an_empty_root_option_is_named_as_the_option(runs, capsys):
    code, _, err = cli(capsys, "runs", "show", runs[1][:8], "--root=")
    assert code == 2 and "--root is empty" in err


# -- ids ------------------------------------------------------------------------------------------


def test_an_id_with_a_typo_names_the_nearest_run(runs, capsys):
    root, rid = runs
    typo = rid[:3] + ("0" if rid[3] != "0" else "1") + rid[4:8]
    code, _, err = cli(capsys, "runs", "show", typo, "--root", root)
    assert code == 1 and f"did you mean {rid[:8]}" in err


def test_export_with_the_file_and_the_id_swapped_says_the_id_comes_first(runs, capsys, tmp_path):
    root, rid = runs
    code, _, err = cli(capsys, "runs", "export", tmp_path / "m.safetensors", rid[:8], "--root", root)
    assert code == 2 and "the run id comes first" in err and not (tmp_path / "m.safetensors").exists()


# -- values ---------------------------------------------------------------------------------------


def test_an_unknown_status_is_refused_with_the_statuses(runs, capsys):
    code, out, err = cli(capsys, "runs", "list", "--status", "complete", "--root", runs[0])
    assert code == 2 and out == "" and "did you mean completed" in err


def test_a_value_of_the_wrong_kind_is_two_lines(runs, capsys, tmp_path):
    root, rid = runs
    code, _, err = cli(capsys, "runs", "export", rid[:8], tmp_path / "m.onnx", "--opset", "abc", "--root", root)
    assert code == 2 and "invalid int value: 'abc'" in err and "nnx runs export --help" in err


def test_an_opset_newer_than_the_exporter_is_a_usage_error_before_anything_is_written(runs, capsys, tmp_path):
    root, rid = runs
    code, _, err = cli(capsys, "runs", "export", rid[:8], tmp_path / "m.onnx", "--opset", "99", "--root", root)
    assert code == 2 and "--opset 99" in err and "--opset 20" in err and not (tmp_path / "m.onnx").exists()


def test_the_group_left_out_is_pointed_at(capsys):
    code, _, err = cli(capsys, "list")
    assert code == 2 and "nnx runs list" in err


# -- other tools' names ---------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "ours"), [
    (["list", "--logdir", "R"], "--root"),
    (["list", "--run-dir=R"], "--root"),
    (["show", "ID", "--runs-dir", "R"], "--root"),
    (["export", "ID", "m.onnx", "--checkpoint", "best"], "--tag"),
    (["export", "ID", "-o", "m.onnx"], "OUT, the second argument"),
    (["verify", "ID", "--fix"], "--repair"),
    (["list", "--fulll"], "did you mean --full"),
])
def test_another_tools_option_name_is_answered_with_nnxs(capsys, argv, ours):
    code, out, err = cli(capsys, "runs", *argv)
    assert code == 2 and out == "" and argv[-1].split("=")[0] in " ".join(argv) and ours in err


# -- outputs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["export", "plot"])
def test_an_output_that_exists_is_kept_unless_force(runs, capsys, tmp_path, command):
    root, rid = runs
    target = tmp_path / ("m.safetensors" if command == "export" else "p.png")
    target.write_bytes(b"mine")
    argv = ["runs", command, rid[:8], *([target] if command == "export" else ["-o", target]), "--root", root]
    code, out, err = cli(capsys, *argv)
    assert code == 2 and out == "" and f"{target} exists" in err and "--force" in err
    assert target.read_bytes() == b"mine"
    assert cli(capsys, *argv, "--force")[0] == 0 and target.read_bytes() != b"mine"


def test_an_output_that_is_a_folder_or_under_a_file_is_said_as_such(runs, capsys, tmp_path):
    root, rid = runs
    code, _, err = cli(capsys, "runs", "export", rid[:8], tmp_path, "--root", root)
    assert code == 2 and f"{tmp_path} is a folder" in err
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    code, _, err = cli(capsys, "runs", "export", rid[:8], blocker / "m.safetensors", "--root", root)
    assert code == 1 and f"{blocker} is a file, not a folder" in err
