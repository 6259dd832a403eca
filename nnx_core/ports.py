"""The ports through which the core acts on the world.

The core decides; adapters act. Every port here is a structural ``typing.Protocol``: an adapter
implements it by having the methods, never by inheriting. Each port has an in-memory adapter in
``nnx_adapters`` so the core can be exercised without torch or a disk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import attrs

ClockKind = Literal["epoch", "optimizer_update"]

_Paths: TypeAlias = list[str]  # inside Storage, whose method ``list`` hides the builtin from its later annotations


class BinaryWriter(Protocol):
    """What ``Storage.write_blob`` hands a producer: a write-only byte sink."""

    def write(self, data: bytes) -> int: ...

    def flush(self) -> None: ...


@attrs.frozen
class BackgroundProducer:
    """A producer for ``Storage.write_blob`` run by a background commit (``nnx_core.background``):
    its blob is written off training's critical path, while training goes on. Called, it produces
    the bytes ``produce`` does. A store may write such a blob with the least of the machine rather
    than in the least time (``FileStorage`` hashes it on the writing thread and writes it around
    the page cache, instead of hashing on a helper thread beside a buffered write); a store that
    does not look writes it as any other producer."""

    produce: Callable[[BinaryWriter], None]

    def __call__(self, sink: BinaryWriter) -> None:
        """Write the blob's bytes to ``sink``."""
        self.produce(sink)


@attrs.frozen
class SizedProducer:
    """A producer for ``Storage.write_blob`` whose blob's size is known before it runs: about
    ``size`` bytes (its tensors' bytes). Called, it produces the bytes ``produce`` does. A store
    may choose how to write a blob by its size (``FileStorage`` writes a large one around the page
    cache, a small one through it); a store that does not look writes it as any other producer."""

    produce: Callable[[BinaryWriter], None]
    size: int

    def __call__(self, sink: BinaryWriter) -> None:
        """Write the blob's bytes to ``sink``."""
        self.produce(sink)


@attrs.frozen
class Receipt:
    """What a durable write produced: the path written, its size in bytes and its SHA-256."""

    path: str
    size: int
    sha256: str


@runtime_checkable
class Storage(Protocol):
    """A run store rooted at one folder; every path is relative, ``/``-separated.

    Guarantees every adapter must keep (``nnx_adapters.testing`` checks them):

    * ``write`` replaces a file on its own through an owned temporary in the same folder
      (create, write, fsync, rename, fsync the folder). After it returns the bytes are durable;
      if it raises, the destination keeps its previous bytes and the temporary is removed.
    * Nothing partial is ever visible to ``read`` / ``list`` / ``exists``: temporaries are named
      ``.tmp-*`` and readers skip them. ``clean_temporaries`` removes stale ones.
    * An fsync or write error is raised, never swallowed.

    Paths and kinds, as on a POSIX file system (``nnx_adapters.storage.paths.split_path`` is the
    validator): an absolute path, an empty, ``.`` or ``..`` segment, NUL, a backslash, a segment
    over 255 bytes or a reserved name (any ``.tmp-*`` segment, a leading ``.leases``) raises
    ``ValueError`` before anything is touched. Folders exist on their own: ``write`` / ``append``
    / ``write_blob`` create the missing parents, deleting a folder's last file keeps the folder,
    only ``remove_tree`` removes one. Writing where a parent is a file raises
    ``NotADirectoryError``, writing onto a folder ``IsADirectoryError``; reading, listing or
    deleting below a file raises ``NotADirectoryError``.

    ``rename_folder`` is what replacing a whole run uses: the run is moved aside to a new name in
    the same folder in one durable step, and the folder moved aside keeps every file and its bytes
    (readers find it under the old name or the new one, never both or neither).

    One optional capability: ``copy(source, destination)`` durably replaces ``destination`` with
    ``source``'s bytes, as ``write(destination, read(source))`` does (same guarantees, and a
    deferred folder fsync inside a ``sync_group``), but may share the stored bytes instead of
    writing them again (``FileStorage``: a hard link, which an ``append`` to either name breaks
    first). A store without it gets the plain read and write (``copy_file``).
    """

    def read(self, path: str) -> bytes:
        """Return the file's bytes; ``FileNotFoundError`` when absent, ``IsADirectoryError`` for a folder."""

    def exists(self, path: str) -> bool:
        """Whether a (non-temporary) file exists at ``path``; ``False`` for folders and reserved names."""

    def digest(self, path: str) -> Receipt:
        """Size and SHA-256 of a file, computed without copying it into memory (errors as ``read``)."""

    def write(self, path: str, data: bytes, *, sha256: str | None = None) -> Receipt:
        """Atomically and durably replace ``path`` with ``data``.

        ``sha256``: the caller already hashed ``data`` (a content-addressed blob); the receipt
        carries it instead of hashing the bytes a second time.
        """

    def write_blob(self, folder: str, produce: Callable[[BinaryWriter], None]) -> Receipt:
        """Stream bytes from ``produce(writer)`` into ``folder/<their SHA-256>``, durably.

        The same owned-temporary protocol as ``write``; ``folder`` is created before ``produce``
        runs. The destination name is the digest, so an existing blob of the same content is kept
        and the temporary dropped. If ``produce`` raises, that error propagates and nothing new
        is visible (the temporary is removed).
        """

    def append(self, path: str, data: bytes) -> None:
        """Append ``data`` to ``path`` (created, with its parents, if absent) and fsync it."""

    def delete(self, path: str) -> None:
        """Remove a file if it exists (durably); a missing file is fine, a folder ``IsADirectoryError``."""

    def sync_group(self) -> AbstractContextManager[None]:
        """A group of ``write`` / ``write_blob`` / ``delete`` calls made durable together.

        Inside the group each call still replaces (or removes) its file on its own through an
        owned temporary, file fsync included, and readers see it when the call returns; only the
        fsync of its folder is deferred. When the group exits normally every folder changed inside
        is fsynced once, in the order first changed; then every call inside is durable. A crash
        before that may lose any of the group's renames and removals (each whole), so group only
        calls whose durable order among themselves does not matter. A group left by an exception
        syncs nothing; a group inside a group joins it. A store without folder fsyncs returns a
        context that does nothing (``contextlib.nullcontext()``).
        """

    def list(self, folder: str) -> list[str]:
        """Sorted names of the files and folders directly in ``folder`` (``""``: the root).

        Temporaries and the root's ``.leases`` are skipped; a missing folder lists ``[]``, a file
        raises ``NotADirectoryError``.
        """

    def remove_tree(self, folder: str) -> None:
        """Remove a folder and everything under it (admission cleanup/overwrite); missing is fine,
        a file ``NotADirectoryError``, the root ``ValueError``."""

    def rename_folder(self, source: str, destination: str) -> None:
        """Atomically rename the folder ``source`` to ``destination``, a new name in the same parent
        folder, and make the rename durable (fsync of that parent) before returning. ``source``
        missing: FileNotFoundError; ``source`` a file: NotADirectoryError; ``destination`` already
        existing (file or folder, even an empty folder): FileExistsError; a different parent, the
        root, or a reserved name: ValueError (paths validated like every other call, before anything
        is touched). Readers see the folder under the old name or the new one, never both or neither."""

    def temporaries(self, folder: str) -> _Paths:
        """Sorted store paths of the ``.tmp-*`` files under ``folder`` (``""``: the root) — the
        in-flight ones and those a hard kill left — without removing them; missing: ``[]``."""

    def clean_temporaries(self, folder: str) -> int:
        """Remove stale ``.tmp-*`` files left by a hard kill under ``folder``; return the count
        (what ``temporaries(folder)`` listed)."""

    def lease(self, run_id: str) -> AbstractContextManager[None]:
        """Hold the exclusive run lease; raise ``RunLeaseError`` at once if another holds it.

        Exclusive across every handle on the same store (other instances, threads, processes
        where the backend is shared); released when the context exits, also on an exception.
        An invalid run id raises ``InvalidRunIdError``. Leasing does not change what readers see.
        """


def copy_file(storage: Storage, source: str, destination: str) -> None:
    """Durably replace ``destination`` with ``source``'s bytes through the store's optional
    ``copy`` (``Storage``'s docstring), or by reading and writing them where it has none."""
    copy = getattr(storage, "copy", None)
    if copy is not None:
        copy(source, destination)
    else:
        storage.write(destination, storage.read(source))


@runtime_checkable
class Collective(Protocol):
    """Communication between the ranks of one run. One process is world size 1.

    Agreement (every rank taking the same branch) is derived from these calls by
    ``nnx_core.agreement``; an adapter only moves numbers and objects.
    """

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def is_writer(self) -> bool: ...

    def all_reduce_sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of ``values`` over all ranks."""

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""

    def broadcast(self, obj: Any, src: int) -> Any:
        """``src``'s ``obj`` on every rank."""

    def barrier(self, timeout: float | None = None) -> None:
        """Wait for every rank; raise ``RuntimeError`` if one does not arrive in ``timeout``."""


@runtime_checkable
class Clock(Protocol):
    """A learning-rate schedule behind a tick.

    ``kind`` (the schedule's name), ``budget`` (its horizon in ticks, None when unbounded) and
    ``ticks`` (made so far) are what ``nnx_core.schedules.ClockComponent`` checkpoints and checks.
    """

    @property
    def clock(self) -> ClockKind: ...

    @property
    def kind(self) -> str: ...

    @property
    def budget(self) -> int | None: ...

    @property
    def ticks(self) -> int: ...

    def tick(self, value: float | None = None) -> None:
        """Advance one step; ``value`` is the monitored value for plateau schedules."""

    def state(self) -> Mapping[str, Any]: ...

    def load_state(self, state: Mapping[str, Any]) -> None: ...


@runtime_checkable
class Optimizer(Protocol):
    """What an update window needs from an optimizer."""

    def zero_grad(self) -> None: ...

    def scale_grads(self, factor: float) -> None:
        """Multiply every gradient by ``factor`` (window normalisation)."""

    def unscale(self) -> None:
        """Undo loss scaling (fp16); a no-op without a scaler."""

    def grads_finite(self) -> bool: ...

    def clip(self, max_norm: float) -> float:
        """Clip gradients by global L2 norm; return the norm before clipping."""

    def step(self) -> bool:
        """Apply the update; return whether it was committed (False: a scaler skipped it)."""

    def state(self) -> Mapping[str, Any]: ...

    def load_state(self, state: Mapping[str, Any]) -> None: ...

    @property
    def lrs(self) -> list[float]: ...


@runtime_checkable
class GradientSlots(Protocol):
    """Where the framework keeps gradients while a window is open.

    Slot 0 is the parameters' own gradients; slots 1.. are side buffers of the same shapes.
    """

    def backward(self, plan: Sequence[tuple[int, Sequence[tuple[int, float]]]]) -> None:
        """Back-propagate, for each ``(slot, [(term index, scale), ...])``, the sum of
        ``scale × numerator`` of the current microbatch's terms into that slot."""

    def combine(self, factors: Sequence[float]) -> None:
        """Make the parameters' gradients ``Σ_k factors[k] · slot_k``; release the side buffers."""

    def discard(self) -> None:
        """Drop every gradient and side buffer (nothing of the window survives)."""


@runtime_checkable
class LossScale(Protocol):
    """A dynamic loss scale (fp16): gradients arrive multiplied by it; ``unscale`` undoes it."""

    def update(self) -> None:
        """Adapt the scale after a window (grow after finite steps, shrink after an overflow)."""


@runtime_checkable
class Component(Protocol):
    """Checkpointed state a run carries beside its weights (a callback's counters, the monitor's
    best value, the update engine's counts, a schedule's identity).

    ``component_spec()`` names it and its schema version; ``component_state()`` is plain data
    stored in every checkpoint; a stateful resume first collects every component's
    ``check_component_state(saved)`` problems (when the component has that method) and refuses
    with all of them before anything is restored, then calls ``load_component_state(saved)``.
    """

    def component_spec(self) -> tuple[str, int]: ...

    def component_state(self) -> Mapping[str, Any]: ...

    def load_component_state(self, state: Mapping[str, Any]) -> None: ...


def iter_protocols() -> Iterator[type]:
    """Every port, for architecture tests and documentation."""
    yield from (Storage, Collective, Clock, Optimizer, GradientSlots, LossScale, Component)
