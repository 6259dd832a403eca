"""``nnx runs list | show | verify``: output, exit codes, and what ``verify`` catches."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nnx_core.commit import LAST, RunFiles, TagManifest
from nnx_core.errors import StaleCheckpointError
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx
from nnx_api.cli import main
from nnx_api.commands import runs_extra
from nnx_api.storage import MemoryStorage

from tests.api.tiny import batches, tiny_data

N_EPOCHS = 3


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, str]:
    """A committed 3-epoch run (kept pristine: tests that damage it work on a copy)."""
    root = tmp_path_factory.mktemp("cli") / "runs"
    x, y = tiny_data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    params = nnx.NNTrainParams(
        n_epochs=N_EPOCHS, seed=0, train_loader=batches(x, y, 16), val_loader=batches(x, y, 24), progress=False
    )
    run = model.train(params, root=root)
    return root, run.id


@pytest.fixture
def copy(trained, tmp_path) -> tuple[Path, str, RunFiles]:
    root, rid = trained
    target = tmp_path / "runs"
    shutil.copytree(root, target)
    return target, rid, RunFiles(FileStorage(target), rid)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_shows_every_run_with_its_committed_epochs(trained, capsys, tmp_path):
    root, rid = trained
    code, out, _ = cli(capsys, "runs", "list", "--root", str(root))
    assert code == 0
    header, row = out.strip().splitlines()
    assert header.split() == ["ID", "STARTED", "DURATION", "EPOCHS", "BEST", "MONITOR", "STATUS"]
    run = nnx.NNRun.load(rid, root)
    best = run.best()
    fields = row.split()
    assert fields[0] == rid[:8]  # a unique prefix (8 characters)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", fields[1]) and re.fullmatch(r"\d\d:\d\d", fields[2])
    assert re.fullmatch(r"\d+(s|m\d\ds)", fields[3])
    assert fields[4:7] == [str(N_EPOCHS), str(best.epoch_idx), "val.error"]  # the fallback's quantity, by name
    assert float(fields[7]) == pytest.approx(best.selection.value, rel=1e-3) and fields[8] == "completed"
    assert cli(capsys, "runs", "list", "--root", str(root), "--full")[1].splitlines()[1].startswith(rid + " ")
    assert cli(capsys, "runs", "list", "--root", str(tmp_path / "empty"))[:2] == (0, f"no runs under {tmp_path / 'empty'}\n")


def _second_run(root: Path, epochs: int = 2) -> str:
    x, y = tiny_data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=epochs, seed=0, train_loader=batches(x, y, 16), val_loader=batches(x, y, 24), progress=False)
    return model.train(params, root=root).id


def test_list_sorts_and_filters(copy, capsys):
    root, rid, files = copy
    record = json.loads(files.storage.read(files.attempt))  # started a day earlier: the order does not hang on the clock
    files.storage.write(files.attempt, json.dumps({**record, "started_at": "2026-01-01T00:00:00+00:00"}).encode())
    other = _second_run(root)
    def ids(*argv):
        return [line.split()[0] for line in cli(capsys, "runs", "list", "--root", str(root), *argv)[1].splitlines()[1:]]
    assert ids("--sort", "epochs") == [other[:8], rid[:8]]
    assert ids("--sort", "epochs", "--reverse") == [rid[:8], other[:8]]
    assert ids("--sort", "started") == [rid[:8], other[:8]]  # the copy's attempt started first
    assert ids("--where", "train.n_epochs=2") == [other[:8]] and ids("--where", "n_epochs=3") == [rid[:8]]
    assert ids("--status", "completed") == sorted([rid[:8], other[:8]], key=[rid[:8], other[:8]].index)
    assert cli(capsys, "runs", "list", "--root", str(root), "--status", "failed")[1] == f"no runs under {root} match\n"


def test_a_killed_run_shows_interrupted_and_a_live_one_running(copy, capsys):
    root, rid, files = copy
    record = json.loads(files.storage.read(files.attempt))
    files.storage.write(files.attempt, json.dumps({**record, "status": "running", "finished_at": None}).encode())
    row = cli(capsys, "runs", "list", "--root", str(root))[1].splitlines()[1]
    assert row.split()[-1] == "interrupted" and row.split()[3] == "-"  # no duration: it never ended
    with FileStorage(root).lease(rid):  # a writer holds the lease: it is alive
        assert cli(capsys, "runs", "list", "--root", str(root))[1].splitlines()[1].split()[-1] == "running"
    out = cli(capsys, "runs", "verify", rid[:8], "--root", str(root))[1]
    assert "interrupted" in out and f"continues it from epoch {N_EPOCHS}" in out
    assert "attempt: interrupted" in cli(capsys, "runs", "show", rid[:6], "--root", str(root))[1]


def test_every_command_takes_a_unique_prefix(trained, capsys):
    root, rid = trained
    assert cli(capsys, "runs", "show", rid[:8], "--root", str(root))[1].startswith(f"run {rid}\n")
    assert f"run {rid}: OK" in cli(capsys, "runs", "verify", rid[:5], "--root", str(root))[1]
    assert nnx.NNRun.load(rid[:8], root).id == rid
    assert nnx.NNModel.from_checkpoint(rid[:8], root=root).net is not None


def test_verify_reports_a_history_that_repeats_records_after_a_resume(copy, capsys):
    root, rid, files = copy
    history = files.storage.read(files.history).decode().splitlines()
    rows = [line for line in history[1:] if line.split(",")[1] == "1"]
    files.storage.write(files.history, ("\n".join([*history[:-len(rows) - 0], *rows]) + "\n").encode())
    code, out, _ = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 1 and "iter_idx jumps" in out


def test_version_and_the_bare_hint_list_every_command(capsys):
    code, out, _ = cli(capsys, "--version")
    assert code == 0 and out.startswith("nnx ")
    code, _, err = cli(capsys)
    assert code == 2
    for command in ("list", "show", "verify", "plot", "compare", "export", "--version"):
        assert command in err


def test_list_marks_an_unreadable_run_instead_of_failing(copy, capsys):
    root, rid, files = copy
    files.storage.write(files.run_yaml, b"id: nope\nmodel: {}\n")
    code, out, _ = cli(capsys, "runs", "list", "--root", str(root))
    assert code == 0 and rid in out and "unreadable" in out


def test_show_prints_config_tags_best_and_epochs(trained, capsys):
    root, rid = trained
    code, out, _ = cli(capsys, "runs", "show", rid, "--root", str(root))
    assert code == 0
    assert out.startswith(f"run {rid}\n")
    assert "config:" in out and "n_epochs: 3" in out and "input_dim: 4" in out
    run = nnx.NNRun.load(rid, root)
    for tag in run.tags():
        assert f"  {tag} " in out
    best = run.best()
    assert f"best: epoch {best.epoch_idx}" in out
    epochs = out.split("epochs:\n", 1)[1].strip().splitlines()
    assert epochs[0].split()[0] == "EPOCH" and [line.split()[0] for line in epochs[1:]] == ["0", "1", "2"]


def test_verify_passes_on_an_intact_run(trained, capsys):
    root, rid = trained
    code, out, _ = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 0, out
    assert f"run {rid}: OK (LAST epoch {N_EPOCHS - 1}" in out
    blobs = {m.blobs["state"].sha256 for t in nnx.NNRun.load(rid, root).tags() if (m := RunFiles(FileStorage(root), rid).read_tag(t))}
    assert out.count("ok    blob ") == len(blobs)


def _retarget_last(files: RunFiles, data: bytes) -> None:
    """Make LAST name ``data`` as its blob, with a matching SHA-256 (a consistent but crafted blob)."""
    sha = hashlib.sha256(data).hexdigest()
    files.storage.write(files.blob_path(sha), data)
    last = files.read_tag(LAST)
    blobs = {"state": type(last.blobs["state"])(sha, len(data))}
    files.write_tag(TagManifest(tag=LAST, run_id=files.run_id, epoch=last.epoch, blobs=blobs, meta=dict(last.meta)))


def test_verify_reports_a_corrupted_blob(copy, capsys):
    root, rid, files = copy
    ref = files.read_tag(LAST).blobs["state"]
    path = root / files.blob_path(ref.sha256)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    code, out, _ = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 1
    assert "PROBLEM: tag 'last'" in out and "does not match its SHA-256" in out


def test_verify_reports_a_missing_blob(copy, capsys):
    root, rid, files = copy
    os.unlink(root / files.blob_path(files.read_tag("first").blobs["state"].sha256))
    code, out, _ = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 1 and "is missing" in out


def test_verify_of_a_training_run_notes_a_tag_that_moved_on_and_reports_no_problem(copy, capsys, monkeypatch):
    """A commit that lands while ``verify`` reads (the run is training elsewhere) releases the blob of
    the tag just read: a note to verify again, not a damaged run."""
    root, rid, _ = copy
    read_blob, calls = RunFiles.read_blob, []

    def landed(files, ref, **kw):
        calls.append(ref)
        if len(calls) == 1:
            raise StaleCheckpointError(f"run {rid}: blob {ref.sha256} was released after its checkpoint was read")
        return read_blob(files, ref, **kw)

    monkeypatch.setattr(RunFiles, "read_blob", landed)
    code, out, _ = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 0 and "PROBLEM" not in out
    assert "moved on while it was checked (a commit landed: the run is training); verify again" in out


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_verify_refuses_a_blob_carrying_a_pickled_callable(copy, capsys, tmp_path):
    root, rid, files = copy
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    _retarget_last(files, pickle.dumps({"nnx_payload_format": 1, "weights": Exploit()}))
    code, out, _ = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 1 and "refused by the safe loader" in out
    assert not marker.exists()


def test_verify_reports_a_tag_after_last_and_history_missing_last(copy, capsys):
    root, rid, files = copy
    first = files.read_tag("first")
    files.write_tag(TagManifest(tag="best", run_id=rid, epoch=N_EPOCHS + 5, blobs=first.blobs))
    history = files.storage.read(files.history).decode().splitlines()
    kept = [history[0]] + [line for line in history[1:] if line.split(",")[1] != str(N_EPOCHS - 1)]
    files.storage.write(files.history, ("\n".join(kept) + "\n").encode())
    code, out, _ = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 1
    assert f"tag 'best' names epoch {N_EPOCHS + 5}, after LAST ({N_EPOCHS - 1})" in out
    assert f"no rows for LAST's epoch {N_EPOCHS - 1}" in out


def test_verify_refuses_an_empty_last_and_never_erases_history(copy, capsys):
    root, rid, files = copy
    before = files.storage.read(files.history)
    files.storage.write(files.tag_path(LAST), b"")
    code, out, err = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 1 and "empty" in out + err
    assert files.storage.read(files.history) == before


def test_verify_notes_an_uncommitted_tail_and_stale_temporaries_without_failing(copy, capsys):
    root, rid, files = copy
    history = files.storage.read(files.history).decode().splitlines()
    tail = history[-1].split(",")
    tail[0], tail[1] = str(int(tail[0]) + 1), str(N_EPOCHS)  # iter_idx, epoch_idx of an epoch never committed
    files.storage.write(files.history, ("\n".join([*history, ",".join(tail)]) + "\n").encode())
    (root / rid / "checkpoints" / ".tmp-last.json-0123456789abcdef").write_bytes(b"{torn")
    code, out, _ = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 0, out
    assert "newer than LAST" in out and "stale temporary" in out


def test_verify_of_a_run_with_nothing_committed_is_ok(copy, capsys):
    root, rid, files = copy
    for tag in files.tags():
        os.unlink(root / files.tag_path(tag))
    code, out, _ = cli(capsys, "runs", "verify", rid, "--root", str(root))
    assert code == 0 and "nothing committed" in out


@pytest.mark.parametrize("command", ["show", "verify"])
@pytest.mark.parametrize("bad", ["../x", "a/b", "..", "x\x00y", "run*", ".hidden"])
def test_bad_run_ids_are_refused_before_any_path_is_built(trained, capsys, command, bad):
    root, _ = trained
    code, out, err = cli(capsys, "runs", command, bad, "--root", str(root))
    assert code == 2 and "not allowed" in err and out == ""


def test_missing_run_and_usage_errors(trained, capsys):
    root, _ = trained
    code, _, err = cli(capsys, "runs", "show", "0" * 32, "--root", str(root))
    assert code == 1 and "no run" in err
    assert cli(capsys)[0] == 2
    assert cli(capsys, "runs")[0] == 2
    assert cli(capsys, "runs", "frobnicate")[0] == 2


def test_console_script_in_a_subprocess(trained):
    root, rid = trained
    script = Path(sys.executable).with_name("nnx")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "nnx_api.cli"]
    env = {**os.environ, "NNX_PROGRESS": "0"}
    done = subprocess.run(
        [*command, "runs", "verify", rid, "--root", str(root)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"run {rid}: OK" in done.stdout
    bad = subprocess.run(
        [*command, "runs", "show", "../x", "--root", str(root)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert bad.returncode == 2 and "not allowed" in bad.stderr


def test_root_defaults_to_the_environment(trained, capsys, monkeypatch):
    root, rid = trained
    monkeypatch.setenv("NNX_RUNS", str(root))
    code, out, _ = cli(capsys, "runs", "list")
    assert code == 0 and rid[:8] in out


def test_main_writes_to_given_streams(trained):
    root, rid = trained
    out, err = io.StringIO(), io.StringIO()
    assert main(["runs", "verify", rid, "--root", str(root)], out=out, err=err) == 0
    assert "OK" in out.getvalue() and err.getvalue() == ""


def test_every_command_reads_runs_through_the_storage_port(tmp_path, monkeypatch, capsys):
    """The CLI builds its Storage from --root and reads only through it: over a MemoryStorage
    (patched in for FileStorage) every command works while the root never exists on disk."""
    memory = MemoryStorage()
    x, y = tiny_data()
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    rid = model.train(nnx.NNTrainParams(n_epochs=2, seed=0, train_loader=batches(x, y, 16), progress=False), storage=memory).id
    monkeypatch.setattr(runs_extra, "FileStorage", lambda root: memory)
    root = str(tmp_path / "nowhere")
    assert cli(capsys, "runs", "list", "--root", root)[1].splitlines()[1].startswith(rid[:8])
    assert cli(capsys, "runs", "show", rid[:8], "--root", root)[1].startswith(f"run {rid}\n")
    assert f"run {rid}: OK" in cli(capsys, "runs", "verify", rid[:8], "--root", root)[1]
    assert rid[:12] in cli(capsys, "runs", "compare", rid[:8], "--root", root)[1]
    assert cli(capsys, "runs", "export", rid[:8], str(tmp_path / "m.safetensors"), "--tag", "last", "--root", root)[0] == 0
    assert cli(capsys, "runs", "plot", rid[:8], "-o", str(tmp_path / "p.png"), "--root", root)[0] == 0
    assert not (tmp_path / "nowhere").exists()


def _run_with(root: Path, **optim) -> str:
    x, y = tiny_data()
    nnx.set_seed(0)
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=(8,)), nnx.NNModelParams())
    params = nnx.NNTrainParams(n_epochs=optim.pop("epochs", 2), seed=0, optim=nnx.NNOptimParams(**optim),
                               train_loader=batches(x, y, 16), val_loader=batches(x, y, 24), progress=False,
                               monitor=nnx.MonitorSpec("accuracy", split="val", mode="max"))
    return model.train(params, root=root).id


def test_where_compares_numbers_as_numbers_and_names_a_key_typo(tmp_path, capsys):
    root = tmp_path / "runs"
    rid = _run_with(root, max_lr=0.01)
    def ids(*argv):
        return [line.split()[0] for line in cli(capsys, "runs", "list", "--root", str(root), *argv)[1].splitlines()[1:]]
    assert ids("--where", "max_lr=1e-2") == ids("--where", "max_lr=0.01") == ids("--where", "max_lr=0.010") == [rid[:8]]
    assert cli(capsys, "runs", "list", "--root", str(root), "--where", "max_lr=0.02")[1] == f"no runs under {root} match\n"
    code, out, err = cli(capsys, "runs", "list", "--root", str(root), "--where", "n_epoch=2")
    assert code == 2 and "no run has this configuration key" in err and "n_epochs" in err and out == ""


def test_sort_by_monitor_puts_the_best_value_first_for_a_max_monitor(tmp_path, capsys):
    root = tmp_path / "runs"
    rids = [_run_with(root, max_lr=lr, epochs=3) for lr in (1e-4, 0.05)]
    values = {rid: nnx.NNRun.load(rid, root).best().selection.value for rid in rids}
    assert len(set(values.values())) == 2  # accuracies that tell the runs apart
    best_first = [r[:8] for r in sorted(rids, key=values.get, reverse=True)]
    def ids(*argv):
        return [line.split()[0] for line in cli(capsys, "runs", "list", "--root", str(root), *argv)[1].splitlines()[1:]]
    assert ids("--sort", "monitor") == best_first and ids("--sort", "monitor", "--reverse") == best_first[::-1]


def test_a_closed_pipe_ends_the_command_quietly(trained):
    root, rid = trained

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    assert main(["runs", "show", rid[:8], "--root", str(root)], out=ClosedPipe()) == 141  # no traceback
    shown = subprocess.run(  # `nnx runs show ID | head -1`, as a shell runs it
        f"{shlex.quote(sys.executable)} -m nnx_api.cli runs show {rid[:8]} --root {shlex.quote(str(root))} | head -1",
        shell=True, capture_output=True, text=True, timeout=120,
    )
    assert shown.stdout == f"run {rid}\n" and "Traceback" not in shown.stderr
