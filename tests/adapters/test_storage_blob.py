"""Storage.write_blob: streamed, content-addressed, durable; identical on both adapters."""

from __future__ import annotations

import errno
import hashlib
import os
import stat

import pytest

from nnx_core.ports import BackgroundProducer
from nnx_adapters.storage.fs import FileStorage
from nnx_adapters.storage.memory import MemoryStorage


@pytest.fixture(params=["fs", "memory"])
def store(request, tmp_path):
    return FileStorage(tmp_path / "store") if request.param == "fs" else MemoryStorage()


def _threads() -> set[str]:
    import threading

    return {t.name for t in threading.enumerate()}


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
    from nnx_core.errors import CorruptRunError, StaleCheckpointError

    files = RunFiles(store, "r" * 32)
    ref = files.put_blob(b"payload bytes")
    assert store.digest(files.blob_path(ref.sha256)).sha256 == ref.sha256
    files.verify_blob(ref)
    store.write(files.blob_path(ref.sha256), b"payload bytez")  # same size, different bytes
    with pytest.raises(CorruptRunError, match="does not match"):
        files.verify_blob(ref)
    with pytest.raises(StaleCheckpointError, match="released"):  # named by no tag: a reader's stale ref
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


# ---- a background commit's blob (BackgroundProducer): one thread, around the page cache ----------
@pytest.mark.parametrize(
    "sizes", [(10,), (1 << 20,), (10, 1 << 20), ((1 << 20) - 1, 1, 2 << 20, 7), (3 << 20, 4096, 5), (500_000,) * 7]
)
def test_a_background_blob_is_the_same_blob_whatever_the_chunking(store, sizes):
    """Oracle: hashlib over the joined bytes, and the blob an ordinary producer stores."""
    chunks = [os.urandom(n) for n in sizes]
    receipt = store.write_blob("o", BackgroundProducer(produce_chunks(*chunks)))
    data = b"".join(chunks)
    assert receipt.sha256 == hashlib.sha256(data).hexdigest() and receipt.size == len(data)
    assert store.read(receipt.path) == data
    assert store.write_blob("o", produce_chunks(*chunks)) == receipt and store.list("o") == [receipt.sha256]


def test_a_background_blob_goes_around_the_page_cache_until_a_write_ends_off_the_alignment(tmp_path, monkeypatch):
    """Whole chunks go through O_DIRECT; a flush that ends off the 4 KiB alignment (the tail, here
    a producer's flush in the middle) turns it off for the rest, and the bytes are the same."""
    import fcntl

    direct = getattr(os, "O_DIRECT", 0)
    if not direct:
        pytest.skip("no O_DIRECT on this platform")
    seen, refused, real = [], [], os.write
    parts = [os.urandom(2 << 20), os.urandom(5000), os.urandom(3 << 20)]

    def write(fd, data):  # no direct write is ever refused: the off-alignment one is not tried
        try:
            return real(fd, data)
        except OSError as exc:
            refused.append(exc)
            raise

    def produce(sink):
        sink.write(parts[0])
        seen.append(bool(fcntl.fcntl(sink.fd, fcntl.F_GETFL) & direct))
        sink.write(parts[1])
        sink.flush()  # 5,000 bytes: off the alignment
        seen.append(bool(fcntl.fcntl(sink.fd, fcntl.F_GETFL) & direct))
        sink.write(parts[2])

    store = FileStorage(tmp_path / "store")
    monkeypatch.setattr(os, "write", write)
    receipt = store.write_blob("o", BackgroundProducer(produce))
    assert store.read(receipt.path) == b"".join(parts)
    assert seen == [True, False] and refused == []


def test_a_background_blob_starts_no_thread_and_a_failure_leaves_nothing(tmp_path):
    import threading

    store, threads = FileStorage(tmp_path / "store"), []
    real = threading.Thread.start

    def produce(sink):
        sink.write(os.urandom(3 << 20))
        raise OSError(errno.EIO, "Input/output error")

    threading.Thread.start = lambda self: (threads.append(self.name), real(self))  # type: ignore[method-assign]
    try:
        with pytest.raises(OSError, match="Input/output"):
            store.write_blob("o", BackgroundProducer(produce))
    finally:
        threading.Thread.start = real  # type: ignore[method-assign]
    assert threads == [] and store.list("o") == [] and store.clean_temporaries("") == 0


def test_a_device_that_refuses_a_direct_write_gets_it_through_the_page_cache(tmp_path, monkeypatch):
    """EINVAL from a direct write (a device wanting another alignment): the write is redone
    buffered, and the blob is whole."""
    from nnx_adapters.storage import fs
    real, refused = os.write, []

    def write(fd, data):
        if not refused and memoryview(data).nbytes == fs._CHUNK_BYTES:  # the first whole chunk, sent direct
            refused.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, data)

    monkeypatch.setattr(fs.os, "write", write)
    data = os.urandom(3 << 20)
    receipt = FileStorage(tmp_path / "store").write_blob("o", BackgroundProducer(produce_chunks(data)))
    assert refused and receipt.sha256 == hashlib.sha256(data).hexdigest()
    assert FileStorage(tmp_path / "store").read(receipt.path) == data


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize("kind", ["background", "large"])
def test_a_failed_write_of_a_direct_blob_raises_its_own_error_and_leaves_nothing(tmp_path, monkeypatch, kind, code):
    """The second write fails (a background blob's, or the helper's of a large one): the caller
    gets that error, the temporary is removed and no helper thread is left."""
    from nnx_core.ports import SizedProducer
    from nnx_adapters.storage import fs

    real, calls = os.write, []

    def write(fd, data):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(code, os.strerror(code))
        return real(fd, data)

    data = os.urandom(5 << 20)
    producer = (BackgroundProducer(produce_chunks(data)) if kind == "background"
                else SizedProducer(produce_chunks(data), fs._DIRECT_BLOB_BYTES))
    store = FileStorage(tmp_path / "store")
    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OSError) as raised:
        store.write_blob("o", producer)
    monkeypatch.undo()
    assert raised.value.errno == code
    assert store.list("o") == [] and store.clean_temporaries("") == 0
    assert "nnx-blob-write" not in _threads()


# ---- a large blob of a synchronous commit (a SizedProducer past the threshold): chunks written
# ---- around the page cache by a helper thread while the next is hashed ----------------------------
@pytest.fixture
def large(monkeypatch):
    """Every ``SizedProducer`` counts as large here (the real threshold is 100 MB)."""
    from nnx_adapters.storage import fs

    monkeypatch.setattr(fs, "_DIRECT_BLOB_BYTES", 1)
    return fs


@pytest.mark.parametrize(
    "sizes", [(10,), (1 << 20,), (10, 1 << 20), ((1 << 20) - 1, 1, 2 << 20, 7), (3 << 20, 4096, 5), (500_000,) * 7]
)
def test_a_large_blob_is_the_same_blob_whatever_the_chunking(tmp_path, large, monkeypatch, sizes):
    """Oracle: hashlib over the joined bytes, and the blob an ordinary producer stores; every byte
    is in the file before it is fsynced (the helper's last write waited for)."""
    from nnx_core.ports import SizedProducer

    chunks = [os.urandom(n) for n in sizes]
    data = b"".join(chunks)
    synced, real_fsync = [], os.fsync

    def fsync(fd):
        if stat.S_ISREG(os.fstat(fd).st_mode):  # the blob's temporary, not a folder
            synced.append(os.fstat(fd).st_size)
        return real_fsync(fd)

    monkeypatch.setattr(large.os, "fsync", fsync)
    store = FileStorage(tmp_path / "store")
    receipt = store.write_blob("o", SizedProducer(produce_chunks(*chunks), len(data)))
    assert receipt.sha256 == hashlib.sha256(data).hexdigest() and receipt.size == len(data)
    assert store.read(receipt.path) == data and synced == [len(data)]
    monkeypatch.undo()
    assert FileStorage(tmp_path / "plain").write_blob("o", produce_chunks(*chunks)) == receipt
    assert "nnx-blob-write" not in _threads()


def test_a_sized_blob_picks_its_writer_by_size(tmp_path, monkeypatch):
    """Below the threshold the page-cache writer, at or past it the pipelined one (its helper
    thread starts once a second chunk is needed)."""
    import threading

    from nnx_core.ports import SizedProducer
    from nnx_adapters.storage import fs

    started, real = [], threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (started.append(self.name), real(self)))
    data = os.urandom(3 << 20)
    store = FileStorage(tmp_path / "store")
    store.write_blob("small", SizedProducer(produce_chunks(data), fs._DIRECT_BLOB_BYTES - 1))
    assert "nnx-blob-write" not in started
    store.write_blob("large", SizedProducer(produce_chunks(data), fs._DIRECT_BLOB_BYTES))
    assert started.count("nnx-blob-write") == 1
    assert store.read(f"small/{store.list('small')[0]}") == data
    assert store.list("small") == store.list("large")


def test_a_failing_producer_of_a_large_blob_leaves_nothing_and_no_thread(tmp_path, large):
    from nnx_core.ports import SizedProducer

    def produce(sink):
        sink.write(os.urandom(3 << 20))  # two chunks handed to the helper
        raise OSError(errno.EIO, "Input/output error")

    store = FileStorage(tmp_path / "store")
    with pytest.raises(OSError, match="Input/output"):
        store.write_blob("o", SizedProducer(produce, 3 << 20))
    assert store.list("o") == [] and store.clean_temporaries("") == 0
    assert "nnx-blob-write" not in _threads()
