"""``StorageContract``: a hypothesis state machine every ``Storage`` adapter must pass.

Runs against **any** adapter (no cooperation needed). Each rule makes the same call on every
store under test and on ``ReferenceStore`` and demands the same result, or an error of the same
kind (``ValueError`` for a bad path, ``FileNotFoundError`` / ``IsADirectoryError`` /
``NotADirectoryError`` as POSIX resolves it, ``RunLeaseError`` for a held lease):

* agreement with the reference model: ``write``, ``append``, ``read``, ``exists``, ``digest``,
  ``delete``, ``list``, ``remove_tree``, ``rename_folder`` (mostly between siblings, so the
  outcome is a rename, ``FileNotFoundError``, ``NotADirectoryError`` or ``FileExistsError`` more
  often than the ``ValueError`` of a different parent), ``temporaries``, ``clean_temporaries``,
  and the optional ``copy`` (through ``nnx_core.ports.copy_file``, so a store without it is
  checked too);
* blob streaming and digests: ``write_blob`` over chunks of every size (1 MiB ones too) names
  the blob by its SHA-256, stores identical content once, and ``digest`` agrees with ``read``;
* atomicity as readers see it: while a producer is half-way through a blob, a reader walking the
  store sees exactly the state before the call (nothing partial, no temporary); a producer that
  raises leaves nothing new visible, its error propagates unchanged and its temporary is gone;
* no temporary is ever visible, and ``temporaries("")`` is empty between calls;
* lease exclusivity: a held run's lease is refused at once (``RunLeaseError``) through the same
  store and through ``another_handle`` when given; other runs are free; a lease is released when
  its block exits, also by an exception; a bad run id is ``InvalidRunIdError``.

What it cannot show without the adapter's help: that ``write`` is atomic and durable when the
process dies or the disk fails *inside* the call — ``CommitContract`` checks that against
adapters offering crash injection (``nnx_adapters.testing.faults.CrashInjection``).

Use it by subclassing with a factory::

    class TestMyStorage(StorageContract):
        def make_storage(self):
            return MyStorage(...)

    TestMyStorageCase = TestMyStorage.TestCase      # collected by pytest / unittest
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from nnx_core.ports import Storage, copy_file
from nnx_adapters.storage.paths import TMP_PREFIX
from nnx_adapters.testing.model import ReferenceStore, visible_tree

NAMES = ("a", "b", "c")
INVALID_PATHS = ("", "/a", "a//b", "..", "a/../b", "./a", "a/", "a/.tmp-x", ".leases/x", "a\\b", "a\x00b", "x" * 256)
valid_paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
paths = st.one_of(valid_paths, valid_paths, valid_paths, st.sampled_from(INVALID_PATHS))
folders = st.one_of(st.just(""), valid_paths, valid_paths, st.sampled_from(INVALID_PATHS[1:]))
data = st.binary(max_size=24)


def _in(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


_parents = st.lists(st.sampled_from(NAMES), max_size=2).map("/".join)
_two_names = st.one_of(
    st.lists(st.sampled_from(NAMES), min_size=2, max_size=2, unique=True),
    st.lists(st.sampled_from(NAMES), min_size=2, max_size=2, unique=True),
    st.sampled_from(NAMES).map(lambda name: [name, name]),  # onto itself: FileExistsError when there
)
_siblings = st.builds(lambda parent, names: (_in(parent, names[0]), _in(parent, names[1])), _parents, _two_names)
renames = st.one_of(_siblings, _siblings, _siblings, st.tuples(paths, paths))
"""``(source, destination)`` for ``rename_folder``: mostly two names in one folder, else any paths."""
run_ids = st.one_of(st.sampled_from(["r1", "r2"]), st.sampled_from(["r1", "", "..", "a/b"]))


def _pattern(n: int) -> bytes:
    """``n`` deterministic bytes (large chunks without asking hypothesis for megabytes)."""
    return (n.to_bytes(4, "big") * (n // 4 + 1))[:n]


chunks = st.lists(
    st.one_of(data, data, data, st.sampled_from([(1 << 20) - 1, 1 << 20, (1 << 20) + 7]).map(_pattern)),
    max_size=4,
)


class ProducerFailed(Exception):
    """What a blob producer of ``StorageContract`` raises half-way; it must reach the caller unchanged."""


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", call())
    except Exception as exc:  # noqa: BLE001 — compared with the model's outcome
        return ("error", exc)


class StorageContract(RuleBasedStateMachine):
    """The port's contract for any adapter (module docstring). Override ``make_storage``.

    ``make_storages`` may return several stores to drive side by side (they must then agree
    with the model and so with each other); ``dispose_storage`` cleans one up at teardown;
    ``another_handle`` may return a second handle on the same store for the lease checks.
    """

    def __init__(self) -> None:
        super().__init__()
        self.model = ReferenceStore()
        self.stores: list[Storage] = list(self.make_storages())
        self.leases: dict[str, list[contextlib.ExitStack]] = {}

    # -- the user's hooks ---------------------------------------------------------------------

    def make_storage(self) -> Storage:
        """A fresh, empty store of the adapter under test."""
        raise NotImplementedError("subclass StorageContract and return your adapter from make_storage()")

    def make_storages(self) -> list[Storage]:
        """The stores driven side by side (default: one from ``make_storage``)."""
        return [self.make_storage()]

    def dispose_storage(self, store: Storage) -> None:
        """Clean up a store after the run (default: nothing)."""

    def another_handle(self, store: Storage) -> Storage | None:
        """A second handle on the same store (a new instance on the same location), or None."""
        return None

    def teardown(self) -> None:
        for stacks in self.leases.values():
            for stack in stacks:
                stack.close()
        for store in self.stores:
            self.dispose_storage(store)

    # -- agreement ----------------------------------------------------------------------------

    def agree(self, what: str, model_call: Callable[[], Any], store_call: Callable[[Storage], Any]) -> None:
        """``store_call`` on every store gives ``model_call``'s result, or an error of its kind."""
        expected = _outcome(model_call)
        for store in self.stores:
            got = _outcome(lambda: store_call(store))  # noqa: B023 — called at once
            where = f"{store!r}.{what}"
            if expected[0] == "ok":
                assert got == expected, f"{where}: returned {got[1]!r}, the contract says {expected[1]!r}"
            else:
                kind = type(expected[1])
                assert got[0] == "error" and isinstance(got[1], kind), (
                    f"{where}: {'returned ' + repr(got[1]) if got[0] == 'ok' else 'raised ' + repr(got[1])}, "
                    f"the contract says {kind.__name__} ({expected[1]})"
                )

    @rule(path=paths, payload=data)
    def write(self, path: str, payload: bytes) -> None:
        self.agree(f"write({path!r}, {payload!r})", lambda: self.model.write(path, payload), lambda s: s.write(path, payload))

    @rule(path=paths, payload=data)
    def append(self, path: str, payload: bytes) -> None:
        self.agree(f"append({path!r}, {payload!r})", lambda: self.model.append(path, payload), lambda s: s.append(path, payload))

    @rule(path=paths)
    def read(self, path: str) -> None:
        self.agree(f"read({path!r})", lambda: self.model.read(path), lambda s: s.read(path))

    @rule(path=paths)
    def exists(self, path: str) -> None:
        self.agree(f"exists({path!r})", lambda: self.model.exists(path), lambda s: s.exists(path))

    @rule(path=paths)
    def digest(self, path: str) -> None:
        self.agree(f"digest({path!r})", lambda: self.model.digest(path), lambda s: s.digest(path))

    @rule(source=paths, destination=paths)
    def copy(self, source: str, destination: str) -> None:
        """The port's optional ``copy`` (or the read and write standing in for it) acts as
        ``write(destination, read(source))``; replacing either name later leaves the other."""
        self.agree(
            f"copy({source!r}, {destination!r})",
            lambda: self.model.write(destination, self.model.read(source)) and None,
            lambda s: copy_file(s, source, destination),
        )

    @rule(path=paths)
    def delete(self, path: str) -> None:
        self.agree(f"delete({path!r})", lambda: self.model.delete(path), lambda s: s.delete(path))

    @rule(calls=st.lists(st.tuples(paths, st.one_of(st.none(), data)), min_size=1, max_size=4))
    def grouped(self, calls: list[tuple[str, bytes | None]]) -> None:
        """Writes (and deletes, ``None``) inside ``sync_group`` act as they do alone: each call's
        result, and what readers see after it, before the group has synced anything."""
        with contextlib.ExitStack() as groups:
            for store in self.stores:
                groups.enter_context(store.sync_group())
            for path, payload in calls:
                if payload is None:
                    self.delete(path)
                else:
                    self.write(path, payload)
                self.readers_see_the_model()

    @rule(folder=folders)
    def list(self, folder: str) -> None:
        self.agree(f"list({folder!r})", lambda: self.model.list(folder), lambda s: s.list(folder))

    @rule(folder=paths)
    def remove_tree(self, folder: str) -> None:
        self.agree(f"remove_tree({folder!r})", lambda: self.model.remove_tree(folder), lambda s: s.remove_tree(folder))

    @rule(pair=renames, data=st.data())
    def rename_folder(self, pair: tuple[str, str], data: st.DataObject) -> None:
        """Every file and folder under the source is found under the new name afterwards, with its
        bytes (the invariant ``readers_see_the_model``), or the same error as the model's. Half the
        time the source is a folder the model holds, renamed to a sibling name (``z``: often new)."""
        source, destination = pair
        if self.model.folders and data.draw(st.booleans(), label="an existing folder"):
            source = data.draw(st.sampled_from(sorted(self.model.folders)), label="source")
            destination = _in(source.rpartition("/")[0], data.draw(st.sampled_from((*NAMES, "z")), label="new name"))
        self.agree(
            f"rename_folder({source!r}, {destination!r})",
            lambda: self.model.rename_folder(source, destination),
            lambda s: s.rename_folder(source, destination),
        )

    @rule(folder=folders)
    def temporaries(self, folder: str) -> None:
        self.agree(f"temporaries({folder!r})", lambda: self.model.temporaries(folder), lambda s: s.temporaries(folder))

    @rule(folder=folders)
    def clean_temporaries(self, folder: str) -> None:
        self.agree(
            f"clean_temporaries({folder!r})", lambda: self.model.clean_temporaries(folder), lambda s: s.clean_temporaries(folder)
        )

    # -- blobs --------------------------------------------------------------------------------

    @rule(folder=paths, parts=chunks, fail_at=st.one_of(st.none(), st.integers(0, 3)))
    def write_blob(self, folder: str, parts: list[bytes], fail_at: int | None) -> None:
        """Stream ``parts``; a reader looks at the store half-way; maybe the producer fails."""
        blob = b"".join(parts)
        opened = _outcome(lambda: self.model.open_blob_folder(folder))
        failing = fail_at is not None and fail_at <= len(parts)
        before = self.model.tree()  # what a reader may see while the producer runs
        if opened[0] == "ok" and not failing:
            expected = _outcome(lambda: self.model.write_blob(folder, blob))
        else:
            expected = opened if opened[0] == "error" else ("error", ProducerFailed())
        for store in self.stores:
            where = f"{store!r}.write_blob({folder!r}, {len(parts)} chunks of {[len(p) for p in parts]} bytes)"
            error = ProducerFailed(f"the producer failed after {fail_at} chunk(s)")

            def produce(sink: Any, store: Storage = store, where: str = where, error: Exception = error) -> None:
                for i, part in enumerate(parts):
                    if i == fail_at:
                        raise error
                    sink.write(part)
                    if i == 0:
                        try:
                            seen = visible_tree(store)
                        except AssertionError as exc:
                            raise AssertionError(f"{where}: half-way through the write, {exc}") from None
                        assert seen == before, f"{where}: a reader saw {seen} half-way, not {before} (partial write visible)"
                if fail_at == len(parts):
                    raise error

            got = _outcome(lambda: store.write_blob(folder, produce))  # noqa: B023
            if got[0] == "error" and isinstance(got[1], AssertionError):
                raise got[1]
            if expected[0] == "ok":
                assert got == expected, f"{where}: returned {got[1]!r}, the contract says {expected[1]!r}"
            elif isinstance(expected[1], ProducerFailed):
                assert got[0] == "error" and got[1] is error, f"{where}: the producer's error did not propagate: {got[1]!r}"
                assert store.temporaries(folder) == [], f"{where}: the failed blob's temporary was not removed"
            else:
                kind = type(expected[1])
                assert got[0] == "error" and isinstance(got[1], kind), f"{where}: {got[1]!r}, the contract says {kind.__name__}"

    # -- leases -------------------------------------------------------------------------------

    @rule(run_id=run_ids)
    def take_lease(self, run_id: str) -> None:
        """Hold a run's lease on every store (refused everywhere if it is held or invalid)."""
        expected = _outcome(lambda: self.model.take_lease(run_id))
        stacks = []
        for store in self.stores:
            stack = contextlib.ExitStack()
            got = _outcome(lambda: stack.enter_context(store.lease(run_id)))  # noqa: B023
            where = f"{store!r}.lease({run_id!r})"
            if expected[0] == "ok":
                assert got[0] == "ok", f"{where} raised {got[1]!r}; the lease is free"
                stacks.append(stack)
            else:
                kind = type(expected[1])
                assert got[0] == "error" and isinstance(got[1], kind), (
                    f"{where}: {'granted' if got[0] == 'ok' else repr(got[1])}, the contract says {kind.__name__}"
                )
                stack.close()
                other = self.another_handle(store)
                if other is not None and run_id in self.model.held:
                    again = _outcome(lambda: other.lease(run_id).__enter__())  # noqa: B023
                    assert again[0] == "error" and isinstance(again[1], kind), (
                        f"{other!r}.lease({run_id!r}) on the same store: {again[1]!r}, the lease is held elsewhere"
                    )
        if stacks:
            self.leases[run_id] = stacks

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data())
    def release_lease(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.leases)))
        for stack in self.leases.pop(run_id):
            stack.close()
        self.model.release_lease(run_id)

    @rule(run_id=st.sampled_from(["r1", "r2"]))
    def lease_released_by_an_error(self, run_id: str) -> None:
        """A block that raises releases its lease (skipped while the run is held)."""
        if run_id in self.model.held:
            return
        for store in self.stores:
            with contextlib.suppress(ProducerFailed), store.lease(run_id):
                raise ProducerFailed("inside the lease")
            with store.lease(run_id):
                pass

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def readers_see_the_model(self) -> None:
        files, folders_ = self.model.tree()
        for store in self.stores:
            seen = visible_tree(store)
            assert seen == (files, folders_), f"{store!r}: readers see {seen}, the contract says {(files, folders_)}"
            names = [p for p in (*seen[0], *seen[1]) if TMP_PREFIX in p]
            assert names == [], f"{store!r}: temporaries visible: {names}"
            assert store.temporaries("") == [], f"{store!r}: temporaries left between calls: {store.temporaries('')}"
            for path, content in files.items():
                receipt = store.digest(path)
                assert (receipt.size, receipt.sha256) == (len(content), hashlib.sha256(content).hexdigest()), (
                    f"{store!r}.digest({path!r}) = {receipt}, not the digest of its bytes"
                )
