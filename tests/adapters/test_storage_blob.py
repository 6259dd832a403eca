"""Storage.write_blob: streamed, content-addressed, durable; identical on both adapters."""

from __future__ import annotations

import errno
import hashlib
import os

import pytest

from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.memory import MemoryStorage


@pytest.fixture(params=["fs", "memory"])
def store(request, tmp_path):
    return FileStorage(tmp_path / "store") if request.param == "fs" else MemoryStorage()


def produce_chunks(*chunks):
    def produce(sink):
        for chunk in chunks:
            sink.write(chunk)

    return produce


def test_streamed_blob_is_named_by_its_digest(store):
    big = os.urandom(3 << 20)  # crosses the overlap threshold
    chunks = (b"head", big, b"x" * 100, b"tail")
    receipt = store.write_blob("run/objects", produce_chunks(*chunks))
    data = b"".join(chunks)
    assert receipt.sha256 == hashlib.sha256(data).hexdigest() and receipt.size == len(data)
    assert receipt.path == f"run/objects/{receipt.sha256}"
    assert store.read(receipt.path) == data
    assert store.list("run/objects") == [receipt.sha256]


def test_same_content_is_stored_once(store):
    first = store.write_blob("o", produce_chunks(b"abc"))
    second = store.write_blob("o", produce_chunks(b"a", b"bc"))
    assert first == second and store.list("o") == [first.sha256]


def test_failing_producer_leaves_nothing(store):
    def produce(sink):
        sink.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        store.write_blob("o", produce)
    assert store.list("o") == []
    assert store.clean_temporaries("") == 0


def test_digest_hashes_in_place_and_verify_blob_catches_corruption(store):
    from nnx_core.commit import BlobRef, RunFiles
    from nnx_core.errors import CorruptRunError

    files = RunFiles(store, "r" * 32)
    ref = files.put_blob(b"payload bytes")
    assert store.digest(files.blob_path(ref.sha256)).sha256 == ref.sha256
    files.verify_blob(ref)
    store.write(files.blob_path(ref.sha256), b"payload bytez")  # same size, different bytes
    with pytest.raises(CorruptRunError, match="does not match"):
        files.verify_blob(ref)
    with pytest.raises(CorruptRunError, match="missing"):
        files.verify_blob(BlobRef("0" * 64, 1))


@pytest.mark.parametrize("sizes", [(10, 1 << 20), (500_000, 600_000, 3), ((1 << 20) - 1, 1, 2 << 20, 7), (3 << 20,)])
def test_digest_is_right_whatever_the_chunking(store, sizes):
    """Small heads hashed inline, then the rest hashed behind the writes from the file itself."""
    chunks = [os.urandom(n) for n in sizes]
    receipt = store.write_blob("o", produce_chunks(*chunks))
    data = b"".join(chunks)
    assert receipt.sha256 == hashlib.sha256(data).hexdigest()
    assert store.read(receipt.path) == data


def test_failure_after_a_large_chunk_leaves_nothing_and_no_thread(store):
    import threading

    def produce(sink):
        sink.write(os.urandom(3 << 20))  # the trailing hasher is running now
        raise OSError(errno.EIO, "Input/output error")

    before = threading.active_count()
    with pytest.raises(OSError, match="Input/output"):
        store.write_blob("o", produce)
    assert store.list("o") == [] and store.clean_temporaries("") == 0
    assert threading.active_count() == before
