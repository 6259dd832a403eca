"""The epoch commit protocol and the load rules, over the ``Storage`` port.

Layout of one run (paths relative to the runs root)::

    <id>/run.yaml, metadata.yaml       configuration and environment (written at admission)
    <id>/idps.csv                      eager history
    <id>/attempt.json                  the writer's attempt record
    <id>/checkpoints/<tag>.json        tag manifests: epoch + the blobs it names, with SHA-256
    <id>/checkpoints/objects/<sha256>  immutable content-addressed payload blobs

One epoch commits in this order (``commit_epoch``):

    1. payload blob        inert until a tag names it; identical bytes are written once. Blobs
                           no tag names any more (the previous commit's) are deleted first
    2. history             idps.csv with the epoch's rows, or a journal step (chunks, index,
                           epoch rows, manifest: ``nnx_core.journal``) given as ``history_step``
    3. LAST                the commit marker; an eager history's committed size is in its meta
                           (``history_bytes``). If it fails, history is rolled back to the
                           previous committed epoch and the error is raised
    4. phase tags, BEST    copies of LAST's manifest (it lists them as aliases): a hard link
                           and a rename each where the store shares bytes (``copy_file``)
    5. deferred writes     callback artifacts; they can only refer to committed epochs

Steps 1 and 2 (eager history) are one ``Storage.sync_group``: each file is still replaced on its
own through an owned temporary, and one folder fsync per folder makes the blob, the removals and
idps.csv durable together before LAST is written (nothing orders them among themselves: the blob
is inert, a dead blob is named by nothing, and readers truncate history to LAST). When the caller
knows idps.csv holds exactly the previous commit's bytes and the new bytes extend them
(``EpochCommit.append_history``), the new rows are appended and fsynced instead (no temporary,
rename or folder fsync). A crash inside that append can leave a torn or zero-filled tail past
LAST's ``history_bytes``; readers (``read_history``) cut such a tail off, and the next session's
first commit replaces the file whole. A journal step keeps its own order outside the group. The
tags of step 4 are one group too, after LAST is durable; a crash before they are durable leaves
them behind LAST, which lists them, and the next writer finishes them (``complete_tags``).
``refresh_last`` collects what the final LAST leaves unnamed.

A mid-epoch commit (at an optimizer-update boundary inside epoch e) is the same ``commit_epoch``
in the same order, with less: the blob, the history holding the epoch's records so far, then LAST
naming epoch e with ``meta["position"]`` (``Position``: the records, batches, updates and samples
of e it holds) — and nothing else: no phase tag, no BEST, no deferred write (``commit_epoch``
refuses them with a position). The epoch-end commit of e later writes a LAST without a position.

Which tags an epoch moves is decided here too (``epoch_tags``): the phase tag of its position in
the call (FIRST, Q1..Q3) and BEST when the epoch's monitor decision improved. A callback's
weights-only tag (``weights_tag``: ``ModelCheckpoint``) is a deferred write naming the committed
epoch. After finalization LAST is refreshed from the final model (``refresh_last``), keeping the
committed epoch and its meta, so ``on_train_end`` changes reach the checkpoint.

A failure after LAST keeps the committed history/LAST pair. Load rules (``load_last`` and
friends): no LAST means nothing committed; a tag LAST lists whose file is missing or names an
earlier epoch reads as LAST (``RunFiles.read_tag``: step 4 undone, finished by the next writer); an empty, unparsable or mismatched LAST is refused
with ``CorruptRunError`` and never read as "erase history"; history newer than LAST's epoch is
truncated in what readers see (``read_history``); a blob is verified against its SHA-256 before a
resume uses it. A mid-epoch LAST at epoch e (``position_of``; a malformed position is
``CorruptRunError``) commits every record of the epochs before e and the first ``records`` records
of e in file order: further records of e and records of later epochs are not committed
(``truncate_to_last``), epoch e is not complete (``complete_epoch``), and a history holding fewer
than ``records`` of e lacks committed records (``committed_coverage``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import attrs

from nnx_core.eager_history import coverage_problems, parse_history
from nnx_core.errors import CorruptRunError, NNxError, StaleCheckpointError
from nnx_core.identity import validate_run_id, validate_tag
from nnx_core.ports import BinaryWriter, Storage, copy_file

TAG_FORMAT = "nnx.tag/1"
HISTORY_BYTES = "history_bytes"  # LAST meta: the committed length of an eager idps.csv
POSITION = "position"  # LAST meta of a mid-epoch commit: where it stands in its epoch (``Position``)
LAST, BEST, FIRST, Q1, Q2, Q3 = "last", "best", "first", "q1", "q2", "q3"
BUILTIN_TAGS = (LAST, BEST, FIRST, Q1, Q2, Q3)


def phase_tags(local_epoch: int, n_epochs: int) -> tuple[str, ...]:
    """Phase tags of an epoch index within one ``train()`` call (REFERENCE §9.4).

    0 → FIRST; ``int(n/4)-1`` → Q1; ``int(n/2)-1`` → Q2; ``int(3n/4)-1`` → Q3, as an elif chain:
    for small ``n`` a quarter that collides with an earlier tag is skipped.
    """
    if local_epoch == 0:
        return (FIRST,)
    for tag, point in ((Q1, n_epochs // 4 - 1), (Q2, n_epochs // 2 - 1), (Q3, (3 * n_epochs) // 4 - 1)):
        if local_epoch == point:
            return (tag,)
    return ()


def epoch_tags(local_epoch: int, n_epochs: int, *, phases: bool, improved: bool) -> tuple[str, ...]:
    """The tags an epoch's commit moves besides LAST: its phase tag (when phase checkpoints are
    on) and BEST (when the epoch's monitor decision improved), in that order."""
    tags = phase_tags(local_epoch, n_epochs) if phases else ()
    return (*tags, BEST) if improved else tags


@attrs.frozen
class BlobRef:
    """A content-addressed payload: its SHA-256 and size."""

    sha256: str
    size: int


@attrs.frozen(kw_only=True)
class TagManifest:
    """A small tag file: which run and epoch it names and the blobs holding that epoch's state.

    ``aliases``: the other tags the same bytes are written as (the phase tags and BEST of LAST's
    commit, which the store may then copy without writing them again). A manifest read back is
    the tag it was read as, without aliases.
    """

    tag: str
    run_id: str
    epoch: int
    blobs: Mapping[str, BlobRef]
    meta: Mapping[str, Any] = attrs.field(factory=dict)
    aliases: tuple[str, ...] = ()

    def to_bytes(self) -> bytes:
        """Canonical JSON bytes of the manifest."""
        doc = {
            "format": TAG_FORMAT,
            "tag": self.tag,
            "run_id": self.run_id,
            "epoch": self.epoch,
            "blobs": {k: {"sha256": v.sha256, "size": v.size} for k, v in sorted(self.blobs.items())},
            "meta": dict(self.meta),
        }
        if self.aliases:
            doc["aliases"] = list(self.aliases)
        return json.dumps(doc, sort_keys=True, indent=1).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes, *, tag: str, run_id: str) -> TagManifest:
        """Parse and check a manifest; anything empty, torn or mismatched is CorruptRunError."""
        where = f"run {run_id} tag {tag!r}"
        if not data.strip():
            raise CorruptRunError(f"{where}: the tag file is empty (torn write?); history was NOT erased")
        try:
            doc = json.loads(data.decode("utf-8"))
            if doc.get("format") != TAG_FORMAT:
                raise ValueError(f"unknown format {doc.get('format')!r}")
            blobs = {k: BlobRef(str(v["sha256"]), int(v["size"])) for k, v in doc["blobs"].items()}
            written, aliases = doc["tag"], doc.get("aliases", [])
            if not isinstance(aliases, list) or not all(isinstance(alias, str) for alias in aliases):
                raise ValueError("aliases is not a list of tag names")
            manifest = cls(tag=tag, run_id=doc["run_id"], epoch=int(doc["epoch"]), blobs=blobs, meta=doc["meta"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptRunError(f"{where}: the tag file is unparsable ({exc}); history was NOT erased") from exc
        if tag not in (written, *aliases) or manifest.run_id != run_id:
            raise CorruptRunError(
                f"{where}: the tag file names tag {written!r} of run {manifest.run_id} (mixed or copied files)"
            )
        position_of(manifest)  # a malformed mid-epoch position is refused here, never read past
        return manifest


@attrs.frozen(kw_only=True)
class Position:
    """Where a mid-epoch LAST stands in its epoch (its ``meta["position"]``).

    ``records``: how many records of the epoch the committed history holds (the epoch's first
    ones, in file order); ``batches`` / ``samples``: the epoch's batches and samples consumed;
    ``updates``: the optimizer updates of the epoch committed; ``epoch_batches`` /
    ``epoch_updates``: how many batches and updates the whole epoch has, None when not known.
    """

    records: int
    batches: int
    updates: int
    samples: int
    epoch_batches: int | None = None
    epoch_updates: int | None = None

    def state(self) -> dict[str, int | None]:
        """The ``meta["position"]`` mapping (every field; an unknown total is None)."""
        return attrs.asdict(self)

    @classmethod
    def from_state(cls, doc: Any, where: str) -> Position:
        """The position ``doc`` (a LAST's ``meta["position"]``) holds; a malformed one is
        ``CorruptRunError`` naming ``where``. A missing total reads as None (not known)."""
        problem = _position_problem(doc)
        if problem is not None:
            raise CorruptRunError(f"{where}: the mid-epoch position is malformed ({problem}); history was NOT erased")
        return cls(**{name: doc.get(name) for name in (*POSITION_COUNTS, *POSITION_TOTALS)})


POSITION_COUNTS = ("records", "batches", "updates", "samples")  # required: counts ≥ 0
POSITION_TOTALS = ("epoch_batches", "epoch_updates")  # a count ≥ 0, or None when not known


def _position_problem(doc: Any) -> str | None:
    """What is wrong with a ``meta["position"]`` value, None when nothing is."""
    if not isinstance(doc, Mapping):
        return f"{type(doc).__name__}, not a mapping"
    for name in (*POSITION_COUNTS, *POSITION_TOTALS):
        value = doc.get(name)
        if value is None and name in POSITION_TOTALS:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{name} is {value!r}, not a count"
    for done, total in (("batches", "epoch_batches"), ("updates", "epoch_updates")):
        if doc.get(total) is not None and doc[done] > doc[total]:
            return f"{done} {doc[done]} exceeds {total} {doc[total]}"
    return None


def position_of(manifest: TagManifest) -> Position | None:
    """The position of a mid-epoch LAST; None for a manifest without one (an epoch-end LAST, or
    any other tag). A malformed position is ``CorruptRunError``, never read as "no position"."""
    if POSITION not in manifest.meta:
        return None
    return Position.from_state(manifest.meta[POSITION], f"run {manifest.run_id} tag {manifest.tag!r}")


def history_cut(last: TagManifest | None) -> tuple[int | None, int | None]:
    """What of a history ``last`` commits, as a journal reader and writer take it: ``(epoch,
    records of it)``; records None: the epoch whole (an epoch-end LAST); (None, None): nothing."""
    if last is None:
        return None, None
    position = position_of(last)
    return last.epoch, None if position is None else position.records


def complete_epoch(last: TagManifest | None) -> int | None:
    """The newest epoch ``last`` commits whole: its epoch, or for a mid-epoch LAST the epoch
    before it; None when nothing is committed whole (no LAST, or a mid-epoch LAST of epoch 0)."""
    if last is None:
        return None
    if position_of(last) is None:
        return last.epoch
    return last.epoch - 1 if last.epoch > 0 else None


def committed_coverage(epochs: Iterable[int], last: TagManifest, what: str, unit: str = "records") -> list[str]:
    """Problems with the epochs of a history's committed records (one per record, truncated to
    ``last``): an epoch-end LAST needs its epoch and every epoch from the history's first up to it
    (``coverage_problems``); a mid-epoch LAST at epoch e needs every epoch from the first up to
    e - 1 and the position's ``records`` records of e (``what`` and ``unit`` name the history)."""
    position = position_of(last)
    seen = list(epochs)
    if position is None:
        return coverage_problems(seen, last.epoch, what, unit)
    before = sorted({e for e in seen if e < last.epoch})
    missing = sorted(set(range(before[0], last.epoch)) - set(before)) if before else []
    problems = [f"{what} misses committed epoch(s) {missing}"] if missing else []
    held = seen.count(last.epoch)
    if held < position.records:
        problems.append(
            f"{what} holds {held} {unit} of epoch {last.epoch}, but LAST committed the epoch up to its first "
            f"{position.records} (a mid-epoch commit)"
        )
    return problems


class RunFiles:
    """Paths and typed reads/writes of one run's files over a ``Storage``."""

    def __init__(self, storage: Storage, run_id: str, folder: str | None = None) -> None:
        """``folder``: where the run's files live, when not in the folder named by its id (a run
        kept aside while a replacement of it has not committed: ``nnx_core.replacement``)."""
        self.storage = storage
        self.run_id = validate_run_id(run_id)
        self.root = root = folder if folder is not None else run_id
        self.run_yaml = f"{root}/run.yaml"
        self.metadata_yaml = f"{root}/metadata.yaml"
        self.history = f"{root}/idps.csv"
        self.attempt = f"{root}/attempt.json"
        self.checkpoints = f"{root}/checkpoints"
        self.objects = f"{root}/checkpoints/objects"

    def tag_path(self, tag: str) -> str:
        """Where a tag's manifest lives."""
        return f"{self.checkpoints}/{validate_tag(tag)}.json"

    def blob_path(self, sha256: str) -> str:
        """Where a blob lives."""
        return f"{self.objects}/{sha256}"

    def exists(self) -> bool:
        """Whether the run was admitted (its run.yaml exists)."""
        return self.storage.exists(self.run_yaml)

    def tags(self) -> list[str]:
        """Every committed tag name: the tag files, and the tags LAST lists (``read_tag``)."""
        return sorted({*self.written_tags(), *self._last_aliases()[1]})

    def written_tags(self) -> list[str]:
        """The tags with a file."""
        return sorted(n[:-5] for n in self.storage.list(self.checkpoints) if n.endswith(".json"))

    def read_tag(self, tag: str) -> TagManifest | None:
        """The tag's manifest, None when absent; CorruptRunError when unreadable. A tag the newest
        commit's LAST lists (its phase tag, BEST) reads as LAST while its file is missing or names
        an earlier epoch: a crash after LAST left step 4 undone, and the next writer finishes it
        (``complete_tags``); readers never see the tag behind the commit that moved it."""
        manifest = self.read_written(tag)
        if tag == LAST:
            return manifest
        last, aliases = self._last_aliases()
        if last is not None and tag in aliases and (manifest is None or manifest.epoch < last.epoch):
            return attrs.evolve(last, tag=tag)
        return manifest

    def read_written(self, tag: str) -> TagManifest | None:
        """The tag's own file, as it is (None when absent; CorruptRunError when unreadable)."""
        try:
            data = self.storage.read(self.tag_path(tag))
        except FileNotFoundError:
            return None
        return TagManifest.from_bytes(data, tag=tag, run_id=self.run_id)

    def _last_aliases(self) -> tuple[TagManifest | None, tuple[str, ...]]:
        """LAST and the tags its file lists; (None, ()) without a readable LAST (its own reads say why)."""
        try:
            data = self.storage.read(self.tag_path(LAST))
            last = TagManifest.from_bytes(data, tag=LAST, run_id=self.run_id)
        except (FileNotFoundError, CorruptRunError):
            return None, ()
        return last, tuple(json.loads(data).get("aliases", []))

    def write_tag(self, manifest: TagManifest) -> None:
        """Durably replace a tag's manifest."""
        self.storage.write(self.tag_path(manifest.tag), manifest.to_bytes())

    def put_blob(self, data: bytes | Callable[[BinaryWriter], None]) -> BlobRef:
        """Store a payload once under its SHA-256 (an existing blob is not rewritten).

        ``data`` is the bytes, or a producer writing them to a sink: the store then streams and
        hashes them in one pass, without holding the whole payload in memory.
        """
        if callable(data):
            receipt = self.storage.write_blob(self.objects, data)
            return BlobRef(receipt.sha256, receipt.size)
        digest = hashlib.sha256(data).hexdigest()
        path = self.blob_path(digest)
        if not self.storage.exists(path):
            self.storage.write(path, data, sha256=digest)  # hashed once, not again by the store
        return BlobRef(digest, len(data))

    def verify_blob(self, ref: BlobRef) -> None:
        """Check a stored blob against its SHA-256 and size (hashed in place, not loaded)."""
        try:
            receipt = self.storage.digest(self.blob_path(ref.sha256))
        except FileNotFoundError as exc:
            raise self._missing(ref) from exc
        if receipt.size != ref.size or receipt.sha256 != ref.sha256:
            raise CorruptRunError(
                f"run {self.run_id}: blob {ref.sha256} does not match its SHA-256 (corrupted on disk); "
                "resume from another checkpoint tag"
            )

    def read_blob(self, ref: BlobRef, *, verify: bool = True) -> bytes:
        """A blob's bytes, verified against its SHA-256 and size unless ``verify=False``."""
        try:
            data = self.storage.read(self.blob_path(ref.sha256))
        except FileNotFoundError as exc:
            raise self._missing(ref) from exc
        if verify and (len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.sha256):
            raise CorruptRunError(
                f"run {self.run_id}: blob {ref.sha256} does not match its SHA-256 (corrupted on disk); "
                "resume from another checkpoint tag"
            )
        return data

    def _missing(self, ref: BlobRef) -> NNxError:
        """The error for a blob that is not there. A tag still names it: the run lost a file
        (``CorruptRunError``). None does: the caller read its tag before a later commit or the
        run's replacement released the blob (``collect_garbage``), and must read the tag again."""
        try:
            named = ref.sha256 in self._live_blobs()
        except (OSError, CorruptRunError):
            named = True  # the tags cannot say: the blob's absence is what is known
        if named:
            return CorruptRunError(f"run {self.run_id}: blob {ref.sha256} is missing")
        return StaleCheckpointError(
            f"run {self.run_id}: blob {ref.sha256} was released after its checkpoint was read (a later commit "
            "moved every tag that named it, or the run's replacement committed); nothing is corrupt: read the "
            "checkpoint again (NNRun.load(...).checkpoint(tag))"
        )

    def _live_blobs(self) -> set[str]:
        """The SHA-256 of every blob a tag's file names."""
        return {ref.sha256 for tag in self.written_tags() if (m := self.read_written(tag)) for ref in m.blobs.values()}

    def collect_garbage(self) -> int:
        """Delete blobs that no tag names; return how many were deleted."""
        live = self._live_blobs()
        dead = [name for name in self.storage.list(self.objects) if name not in live]
        for name in dead:
            self.storage.delete(self.blob_path(name))
        return len(dead)


@attrs.frozen(kw_only=True)
class EpochCommit:
    """Everything one epoch commit writes, prepared before any write happens."""

    epoch: int
    payload: bytes | Callable[[BinaryWriter], None]
    history: bytes | None = None
    previous_history: bytes | None = None
    append_history: bool = False  # idps.csv holds exactly previous_history: append the new rows
    tags: Sequence[str] = ()
    meta: Mapping[str, Any] = attrs.field(factory=dict)
    deferred: Sequence[Callable[[], None]] = ()
    history_step: HistoryStep | None = None  # None: the eager idps.csv bytes above


class HistoryStep(Protocol):
    """The "run history" step of a commit: ``commit`` before LAST, ``rollback`` if LAST failed."""

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


@attrs.frozen
class EagerHistoryStep:
    """The eager history step: idps.csv replaced whole, or (``append``: the file holds exactly
    ``previous`` and ``history`` extends it) the new bytes appended; rolled back to ``previous``."""

    files: RunFiles
    history: bytes
    previous: bytes | None
    append: bool = False

    def commit(self) -> None:
        previous = self.previous
        if self.append and previous is not None and self.history.startswith(previous):
            if len(self.history) > len(previous):
                self.files.storage.append(self.files.history, self.history[len(previous) :])
        else:  # the first commit of a session, or a header that gained a column
            self.files.storage.write(self.files.history, self.history)

    def rollback(self) -> None:
        _rollback_history(self.files, self.previous)


def commit_epoch(files: RunFiles, commit: EpochCommit) -> TagManifest:
    """Commit one epoch in the protocol's order (module docstring); return the LAST manifest."""
    step = commit.history_step
    eager = step is None
    if POSITION in commit.meta:
        _check_mid_epoch(commit)
    if step is None:
        if commit.history is None:
            raise ValueError("EpochCommit needs the eager history bytes or a history_step")
        step = EagerHistoryStep(files, commit.history, commit.previous_history, commit.append_history)
    with files.storage.sync_group():  # blob, removals and eager history: durable together
        files.collect_garbage()
        ref = files.put_blob(commit.payload)
        if eager:
            step.commit()
    if not eager:
        step.commit()
    meta = {**commit.meta, HISTORY_BYTES: len(commit.history)} if eager else commit.meta  # type: ignore[arg-type]
    last = TagManifest(
        tag=LAST, run_id=files.run_id, epoch=commit.epoch, blobs={"state": ref}, meta=meta, aliases=tuple(commit.tags)
    )
    try:
        files.write_tag(last)
    except BaseException:
        if not _visible(files, last):  # only the folder fsync failed: the new pair stays together
            try:
                step.rollback()
            except Exception:  # best effort: the LAST failure is the error to report
                pass
        raise
    with files.storage.sync_group():  # phase tags and BEST: LAST's durable bytes, in one folder fsync
        for tag in commit.tags:
            copy_file(files.storage, files.tag_path(LAST), files.tag_path(tag))
    for write in commit.deferred:
        write()
    return last


def _check_mid_epoch(commit: EpochCommit) -> None:
    """A mid-epoch commit (a ``position`` in its meta) moves LAST only, with a well-formed
    position; anything else is refused before anything is written."""
    problem = _position_problem(commit.meta[POSITION])
    if problem is not None:
        raise ValueError(f"a mid-epoch commit of epoch {commit.epoch} needs a well-formed position: {problem}")
    if commit.tags or commit.deferred:
        raise ValueError(
            f"a mid-epoch commit of epoch {commit.epoch} moves LAST only: no phase tag, BEST or deferred write "
            f"(got tags {list(commit.tags)}, {len(commit.deferred)} deferred write(s))"
        )


def weights_tag(files: RunFiles, tag: str, epoch: int, payload: bytes) -> TagManifest:
    """Write a weights-only tag naming ``epoch`` (a deferred write: the epoch is committed)."""
    manifest = TagManifest(
        tag=tag, run_id=files.run_id, epoch=epoch, blobs={"state": files.put_blob(payload)}, meta={"weights_only": True}
    )
    files.write_tag(manifest)
    return manifest


def complete_tags(files: RunFiles) -> tuple[str, ...]:
    """Finish step 4 of the newest commit when a crash after LAST left it undone: each tag LAST
    lists as an alias that is missing or names an earlier epoch becomes a copy of LAST, in one
    folder fsync, as ``commit_epoch`` writes them. Returns the tags written. (LAST is the commit's
    own manifest then: ``refresh_last`` runs only after step 4 was durable, and writes no aliases.)"""
    last = files.read_tag(LAST)  # checked; read back without its aliases, which its bytes list
    if last is None:
        return ()
    behind = []
    for tag in json.loads(files.storage.read(files.tag_path(LAST))).get("aliases", []):
        held = files.read_written(tag)
        if held is None or held.epoch < last.epoch:
            behind.append(tag)
    if behind:
        with files.storage.sync_group():
            for tag in behind:
                copy_file(files.storage, files.tag_path(LAST), files.tag_path(tag))
    return tuple(behind)


def refresh_last(files: RunFiles, payload: bytes | Callable[[BinaryWriter], None] | None) -> TagManifest | None:
    """Rewrite LAST from the final model after finalization: the same epoch and meta, a new blob
    (``payload`` None: the caller knows the final model is the bytes LAST names already; its blob
    stays). Nothing happens when nothing was committed."""
    previous = files.read_tag(LAST)
    if previous is None:
        return None
    manifest = attrs.evolve(previous, blobs=previous.blobs if payload is None else {"state": files.put_blob(payload)})
    files.write_tag(manifest)
    files.collect_garbage()
    return manifest


def _visible(files: RunFiles, last: TagManifest) -> bool:
    """Whether readers already see ``last`` as LAST (its rename happened before the error)."""
    try:
        seen = files.read_tag(LAST)
    except Exception:
        return False
    return seen is not None and seen.epoch == last.epoch and seen.blobs == last.blobs


def _rollback_history(files: RunFiles, previous: bytes | None) -> None:
    """Best effort: put back the previous committed history. Readers truncate to LAST anyway."""
    try:
        if previous is None:
            files.storage.delete(files.history)
        else:
            files.storage.write(files.history, previous)
    except Exception:  # the LAST failure is the error to report
        pass


def write_json(storage: Storage, path: str, doc: Mapping[str, Any]) -> None:
    """Durably replace a small JSON document."""
    storage.write(path, json.dumps(doc, sort_keys=True, indent=1).encode("utf-8"))


def truncate_to_last(records: Iterable[Any], last: TagManifest | None) -> list[Any]:
    """History readers see: records of epochs up to LAST's epoch (none without LAST); for a
    mid-epoch LAST at epoch e, the records of epochs before e and the first ``records`` records
    of e in file order (``Position``). ``iter_committed`` streams the same."""
    return list(iter_committed(records, last))


def iter_committed(records: Iterable[Any], last: TagManifest | None) -> Iterator[Any]:
    """``truncate_to_last``, one record at a time (for a history streamed from its files)."""
    if last is None:
        return
    position = position_of(last)
    of_epoch = 0
    for r in records:
        if position is not None and r.epoch_idx == last.epoch:
            if of_epoch >= position.records:
                continue
            of_epoch += 1
        elif r.epoch_idx > last.epoch:
            continue
        yield r


def _holds_last(records: Sequence[Any], last: TagManifest) -> bool:
    """Whether parsed records hold what LAST committed last: a record of its epoch; for a
    mid-epoch LAST, its ``records`` records of its epoch (with none: a record of the epoch
    before, if there is one)."""
    position = position_of(last)
    epoch, needed = last.epoch, 1
    if position is not None and position.records:
        needed = position.records
    elif position is not None:
        epoch, needed = last.epoch - 1, 1 if last.epoch > 0 else 0
    return sum(1 for r in records if r.epoch_idx == epoch) >= needed


def read_history(files: RunFiles, last: TagManifest | None) -> list[Any]:
    """The committed records of an eager run's idps.csv (epochs up to LAST; [] without the file).

    The file parses whole unless an append was cut by a crash: then the torn or zero-filled tail
    past LAST's ``history_bytes`` is dropped. That prefix must hold LAST's epoch (a mid-epoch
    LAST: its records of it), or the file is not the one LAST committed (``CorruptRunError``, as
    for any unreadable history). Whole first, and only then the cut: a reader holding LAST while
    the next commit replaces the file whole (a header that gained a column) still reads the right
    records, truncated to LAST (``truncate_to_last``).
    """
    try:
        data = files.storage.read(files.history)
    except FileNotFoundError:
        return []
    try:
        records = parse_history(data)
    except CorruptRunError:
        size = last.meta.get(HISTORY_BYTES) if last is not None else None
        if not isinstance(size, int) or len(data) <= size:
            raise
        records = parse_history(data[:size])
        if not _holds_last(records, last):  # type: ignore[arg-type]  # last is not None: it has a size
            raise
    return truncate_to_last(records, last)


def history_tail(files: RunFiles, last: TagManifest | None) -> int:
    """How many bytes of idps.csv no LAST committed (an interrupted commit): the whole file
    without LAST, the bytes past LAST's ``history_bytes``, or, for a LAST written without it, the
    rows past what it commits (``truncate_to_last``: they all follow the committed ones)."""
    if not files.storage.exists(files.history):
        return 0
    size = 0 if last is None else last.meta.get(HISTORY_BYTES)
    if isinstance(size, int):
        return max(0, files.storage.digest(files.history).size - size)
    data = files.storage.read(files.history)
    records = parse_history(data)
    newer = len(records) - len(truncate_to_last(records, last))
    lines = data.splitlines(keepends=True)
    return sum(len(line) for line in lines[len(lines) - newer :]) if newer else 0
