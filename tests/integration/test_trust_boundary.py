"""The trust boundary: loading never executes code and never leaves the runs root.

* A blob carrying a pickled callable (``os.system`` via ``__reduce__``, which really does run
  under an unsafe loader — checked first) is named by LAST with a *matching* SHA-256, so only the
  safe loader stands in the way. Every entry point that reads it refuses with
  ``CorruptRunError`` and the marker file the callable would create never appears.
* ``run.yaml`` / ``metadata.yaml`` carrying a python-object YAML tag are refused (safe loader).
* A corrupted blob, and an empty, unparsable or mixed LAST, are refused with the reason, and the
  history on disk is left exactly as it was.
* Run ids and tags that could leave the runs root (``../x``, ``a/b``, ``..``, NUL, globs, leading
  dot, empty) are refused by every public entry point before any path is built: nothing is
  read outside the root and nothing is written anywhere.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import shlex
import shutil
from pathlib import Path

import pytest
import tinyrun
import torch

from nnx_core.commit import LAST, BlobRef, RunFiles, TagManifest
from nnx_adapters.storage.fs import FileStorage
import nnx_api as nnx
from nnx_api.cli import main as cli

pytestmark = [pytest.mark.timeout(180), pytest.mark.filterwarnings("ignore:Detected pickle protocol"), pytest.mark.usefixtures("one_thread")]

N_EPOCHS = 2
BAD_IDS = ["../x", "a/b", "..", ".", "a\\b", "x\x00y", "run*", "r?n", "[ab]", ".hidden", "/abs", ""]
BAD_TAGS = ["../last", "a/b", "..", "last\x00", "*", ".last", ""]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("trust") / "runs"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _, run = tinyrun.train(root, N_EPOCHS)
    finally:
        torch.set_num_threads(threads)
    return root, run.id


@pytest.fixture
def run(pristine, tmp_path) -> tuple[Path, str, RunFiles]:
    root, rid = pristine
    target = tmp_path / "runs"
    shutil.copytree(root, target)
    return target, rid, RunFiles(FileStorage(target), rid)


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (its parent included, to see writes that escaped the root)."""
    base = root.parent
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def exploit_blobs(marker: Path) -> dict[str, bytes]:
    command = f"touch {shlex.quote(str(marker))}"

    class Exploit:
        def __reduce__(self):
            return (os.system, (command,))

    buffer = io.BytesIO()
    torch.save({"nnx_payload_format": 1, "kind": "nnmodel", "epoch": N_EPOCHS - 1, "weights": Exploit()}, buffer)
    return {
        "torch zip": buffer.getvalue(),
        "raw pickle": pickle.dumps({"nnx_payload_format": 1, "weights": Exploit()}),
    }


def retarget(files: RunFiles, tag: str, data: bytes) -> None:
    """Store ``data`` as a blob and make ``tag`` name it with the right SHA-256 and size."""
    sha = hashlib.sha256(data).hexdigest()
    files.storage.write(files.blob_path(sha), data)
    old = files.read_tag(tag)
    files.write_tag(TagManifest(tag=tag, run_id=files.run_id, epoch=old.epoch, blobs={"state": BlobRef(sha, len(data))}, meta=dict(old.meta)))


@pytest.mark.parametrize("form", ["torch zip", "raw pickle"])
def test_a_blob_carrying_a_pickled_callable_is_refused_without_running_it(run, tmp_path, form):
    root, rid, files = run
    marker = tmp_path / "marker"
    data = exploit_blobs(marker)[form]

    # the crafted blob is armed: an unsafe loader runs the callable
    if form == "raw pickle":
        pickle.loads(data)  # noqa: S301 - on purpose, to prove the payload is live
    else:
        torch.load(io.BytesIO(data), weights_only=False)
    assert marker.exists()
    marker.unlink()

    retarget(files, LAST, data)
    retarget(files, "best", data)
    before = tree(root)

    with pytest.raises(nnx.CorruptRunError, match="safe loader"):
        nnx.NNRun.load(rid, root).checkpoint(LAST).payload()
    with pytest.raises(nnx.CorruptRunError, match="safe loader"):
        nnx.NNRun.load(rid, root).checkpoint("best").weights()
    with pytest.raises(nnx.CorruptRunError, match="safe loader"):
        nnx.NNModel.from_checkpoint(rid, root=root)
    with pytest.raises(nnx.CorruptRunError, match="safe loader"):
        tinyrun.train(root, N_EPOCHS, resume=None, resume_from_run_id=rid)  # a new lineage from it
    with pytest.raises(nnx.CorruptRunError, match="safe loader"):
        tinyrun.train(root, N_EPOCHS)  # resume="auto" of the same script
    assert cli(["runs", "verify", rid, "--root", str(root)]) == 1
    assert not marker.exists()
    after = tree(root)
    assert {k: v for k, v in after.items() if "attempt.json" not in k} == {k: v for k, v in before.items() if "attempt.json" not in k}


@pytest.mark.parametrize("name", ["run.yaml", "metadata.yaml"])
def test_yaml_with_a_python_object_tag_is_refused(run, tmp_path, name):
    root, rid, files = run
    marker = tmp_path / "marker"
    evil = f"!!python/object/apply:os.system [{shlex.quote('touch ' + str(marker))}]\n".encode()
    files.storage.write(f"{rid}/{name}", evil)
    with pytest.raises(nnx.CorruptRunError):
        nnx.NNRun.load(rid, root)
    assert not marker.exists()


def test_a_corrupted_blob_is_refused_before_any_resume_uses_it(run):
    root, rid, files = run
    ref = files.read_tag(LAST).blobs["state"]
    path = root / files.blob_path(ref.sha256)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    before = tree(root)
    with pytest.raises(nnx.CorruptRunError, match="SHA-256"):
        nnx.NNModel.from_checkpoint(rid, root=root)
    with pytest.raises(nnx.CorruptRunError, match="SHA-256"):
        tinyrun.train(root, N_EPOCHS, resume=None, resume_from_run_id=rid)
    with pytest.raises(nnx.CorruptRunError, match="SHA-256"):
        tinyrun.train(root, N_EPOCHS)
    assert tree(root).keys() == before.keys()


@pytest.mark.parametrize(
    "damage, reason",
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b'{"format": "nnx.tag/1", "tag": "last", "run', "unparsable"),
        (b"\x00\xff garbage", "unparsable"),
        (b'{"format": "nnx.tag/9"}', "unparsable"),
        ("other run", "mixed or copied"),
        ("other tag", "mixed or copied"),
    ],
)
def test_a_torn_or_mixed_last_is_refused_and_history_is_kept(run, damage, reason):
    root, rid, files = run
    last = files.read_tag(LAST)
    if damage == "other run":
        damage = TagManifest(tag=LAST, run_id="f" * 32, epoch=last.epoch, blobs=last.blobs).to_bytes()
    elif damage == "other tag":
        damage = TagManifest(tag="best", run_id=rid, epoch=last.epoch, blobs=last.blobs).to_bytes()
    files.storage.write(files.tag_path(LAST), damage)
    history = files.storage.read(files.history)
    with pytest.raises(nnx.CorruptRunError, match=reason):
        nnx.NNRun.load(rid, root)
    with pytest.raises(nnx.CorruptRunError, match=reason):
        tinyrun.train(root, N_EPOCHS)  # resume="auto" must not read it as "nothing committed"
    assert cli(["runs", "verify", rid, "--root", str(root)]) == 1
    assert files.storage.read(files.history) == history  # never erased
    assert files.storage.read(files.tag_path(LAST)) == damage


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_run_ids_are_refused_by_every_entry_point(run, bad):
    root, rid, _ = run
    decoy = root.parent / "x"  # what "../x" would reach: a copy of a real run
    shutil.copytree(root / rid, decoy)
    before = tree(root)
    with pytest.raises(nnx.InvalidRunIdError):
        nnx.NNRun.load(bad, root)
    with pytest.raises(nnx.InvalidRunIdError):
        nnx.NNModel.from_checkpoint(bad, root=root)
    with pytest.raises((nnx.InvalidRunIdError, nnx.ParamsError)):  # "" is refused as a blank string
        tinyrun.train(root, N_EPOCHS, resume=None, resume_from_run_id=bad)
    for command in ("show", "verify"):
        assert cli(["runs", command, bad, "--root", str(root)]) == 2
    assert tree(root) == before  # nothing written, inside or outside the root


@pytest.mark.parametrize("bad", BAD_TAGS)
def test_bad_tags_are_refused_by_every_entry_point(run, bad):
    root, rid, _ = run
    before = tree(root)
    with pytest.raises(nnx.InvalidRunIdError):
        nnx.NNRun.load(rid, root).checkpoint(bad)
    with pytest.raises(nnx.InvalidRunIdError):
        nnx.NNModel.from_checkpoint(rid, bad, root=root)
    with pytest.raises((nnx.InvalidRunIdError, nnx.ParamsError)):
        tinyrun.train(root, N_EPOCHS, resume=None, resume_from_run_id=rid, resume_from_checkpoint=bad)
    assert tree(root) == before


def test_the_intact_run_loads_through_every_entry_point(run):
    """The control: the same entry points accept the undamaged run."""
    root, rid, _ = run
    assert nnx.NNRun.load(rid, root).checkpoint(LAST).payload()["epoch"] == N_EPOCHS - 1
    model = nnx.NNModel.from_checkpoint(rid, root=root)
    assert tinyrun.same_weights(model.net.state_dict(), nnx.NNRun.load(rid, root).checkpoint(LAST).weights())
    _, child = tinyrun.train(root, N_EPOCHS, resume=None, resume_from_run_id=rid)
    assert child.id != rid and child.resume_status["source_run_id"] == rid
    assert cli(["runs", "verify", rid, "--root", str(root)]) == 0
