"""``NNRun``: a run's identity, configuration, committed history and checkpoints on disk."""

from __future__ import annotations

import io
import os
from importlib.metadata import PackageNotFoundError, version
import platform
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import torch
from ruamel.yaml import YAML

from nnx_core.commit import LAST, RunFiles, TagManifest, truncate_to_last
from nnx_core.compilation import CompileRecord
from nnx_core.errors import CorruptRunError, InvalidRunIdError, RunNotFoundError
from nnx_core.history import EagerHistory, epoch_rows, parse_history
from nnx_core.identity import run_id as content_address
from nnx_core.identity import ID_HEX_DIGITS, validate_run_id, validate_tag
from nnx_core.journal import JournalReader
from nnx_core.precision import ResolvedPrecision
from nnx_core.records import IterationDataPoint
from nnx_core.resume import ResumeStatus
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.storage.fs import FileStorage
from nnx_api.config.params import NNModelParams, NNParams, NNTrainerParams, NNTrainParams
from nnx_api.runs.html import run_html
from nnx_api.runs.plots import plot_run

ENV_ROOT = "NNX_RUNS"


def runs_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The runs root: ``root``, else ``$NNX_RUNS``, else ``./runs``."""
    return Path(root if root is not None else os.environ.get(ENV_ROOT, "runs"))


def dump_yaml(doc: Mapping[str, Any]) -> bytes:
    """YAML bytes (ruamel.yaml, safe dumper, sorted keys)."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    buffer = io.StringIO()
    yaml.dump(_sorted(doc), buffer)
    return buffer.getvalue().encode("utf-8")


def _sorted(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_sorted(v) for v in value]
    return value


def load_yaml(data: bytes, *, where: str) -> dict[str, Any]:
    """Parse YAML with the safe loader; a non-mapping document is CorruptRunError."""
    try:
        doc = YAML(typ="safe", pure=True).load(data.decode("utf-8"))
    except Exception as exc:
        raise CorruptRunError(f"{where} is not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise CorruptRunError(f"{where} must hold a mapping")
    return doc


def environment() -> dict[str, Any]:
    """The environment record written to metadata.yaml (never part of the run id)."""
    try:
        nnx_version = version("nnx")
    except PackageNotFoundError:  # running from a source tree
        nnx_version = None
    return {
        "nnx": nnx_version,
        "python": sys.version.split()[0],
        "torch": str(torch.__version__),
        "platform": platform.platform(),
        "cuda_available": torch.cuda.is_available(),
        "cuda_device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }


def resolve_run_id(run_id: str, storage: Any, *, where: str = "the runs root") -> str:
    """The full run id ``run_id`` names: itself when such a run exists (or it is a whole id),
    else the one run whose id starts with it. An ambiguous prefix is ``InvalidRunIdError``,
    listing the candidates; no match is returned as is (the caller reports it missing)."""
    run_id = validate_run_id(run_id)
    if len(run_id) >= ID_HEX_DIGITS or storage.exists(f"{run_id}/run.yaml"):
        return run_id
    try:
        names = storage.list("")
    except FileNotFoundError:
        return run_id
    matches = sorted(n for n in names if n.startswith(run_id) and not n.startswith("."))
    if len(matches) > 1:
        shown = ", ".join(m[:12] for m in matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise InvalidRunIdError(f"run id prefix {run_id!r} matches {len(matches)} runs under {where} ({shown}); give more characters")
    return matches[0] if matches else run_id


@attrs.frozen(kw_only=True)
class Checkpoint:
    """A committed checkpoint tag of a run: its manifest and lazy, verified access to its state."""

    run: NNRun
    manifest: TagManifest

    @property
    def tag(self) -> str:
        """The tag name (``last``, ``best``, ``q1``, ...)."""
        return self.manifest.tag

    @property
    def epoch(self) -> int:
        """The epoch this checkpoint holds."""
        return self.manifest.epoch

    def payload(self, *, verify: bool = True) -> dict[str, Any]:
        """The decoded payload (weights, optimizer, RNG, components), SHA-256-verified first."""
        files = self.run.files()
        data = files.read_blob(self.manifest.blobs["state"], verify=verify)
        return torch_state.decode(data, where=f"run {self.run.id} tag {self.tag!r}")

    def weights(self) -> dict[str, torch.Tensor]:
        """The model's state dict."""
        return self.payload()["weights"]


@attrs.frozen(kw_only=True)
class NNRun:
    """A run: id (content address of ``config``), configuration, history, and where it lives.

    ``NNRun.load(id)`` shows committed state only: records newer than LAST's epoch are dropped.
    ``storage`` is the store the run lives in (default: the file system under ``root``).
    ``data_fingerprint`` is what its loaders yielded when it was last admitted (metadata.yaml's
    ``data``; ``nnx_api.training.fingerprint``), None for a run that predates fingerprints.
    ``compile`` is the ``CompileRecord`` of its latest attempt when that attempt asked for
    ``train(compile=...)`` (metadata.yaml's ``compile``), else None; never part of the id.
    """

    config: Mapping[str, Any]
    root: Path = attrs.field(converter=Path)
    idps: tuple[IterationDataPoint, ...] = attrs.field(default=(), converter=tuple, repr=False)
    resume_status: ResumeStatus | None = attrs.field(default=None, converter=ResumeStatus.coerce)
    precision: ResolvedPrecision | None = attrs.field(default=None, converter=ResolvedPrecision.coerce, eq=False)
    storage: Any = attrs.field(default=None, eq=False, repr=False)
    data_fingerprint: Mapping[str, Any] | None = attrs.field(default=None, eq=False, repr=False)
    compile: CompileRecord | None = attrs.field(default=None, converter=CompileRecord.coerce, eq=False)
    id: str = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "id", content_address(self.config))

    @property
    def path(self) -> Path:
        """``<root>/<id>``."""
        return self.root / self.id

    def state(self) -> dict[str, Any]:
        """``{"id": ..., **config}`` — what run.yaml holds."""
        return {"id": self.id, **self.config}

    def files(self) -> RunFiles:
        """This run's files over its store."""
        return RunFiles(self.storage if self.storage is not None else FileStorage(self.root), self.id)

    def save(self, *, eager_history: bool = True) -> None:
        """Write run.yaml, metadata.yaml and idps.csv (each replaced atomically; no idps.csv for a
        journal run: ``eager_history=False``)."""
        files = self.files()
        files.storage.write(files.run_yaml, dump_yaml(self.state()))
        files.storage.write(files.metadata_yaml, dump_yaml(self.metadata()))
        if eager_history:
            files.storage.write(files.history, EagerHistory(self.idps).render())

    def metadata(self) -> dict[str, Any]:
        """The environment record, plus the resume outcome, the data fingerprint, the precision and
        the compile record when there are."""
        meta = environment()
        if self.resume_status:
            meta["resume"] = self.resume_status.state()
        if self.data_fingerprint:
            meta["data"] = dict(self.data_fingerprint)
        if self.precision is not None:
            meta["precision"] = self.precision.state()
        if self.compile is not None:
            meta["compile"] = self.compile.state()
        return meta

    @classmethod
    def load(cls, id: str, root: str | os.PathLike[str] | None = None, *, storage: Any = None) -> NNRun:  # noqa: A002
        """Load run ``id``'s committed state (``NNRun.load(id=...)``, as NNx names it);
        CorruptRunError if its files are unreadable.

        ``id``: the full id or a unique prefix of it (``nnx runs list`` shows 8 characters).
        ``storage``: the store to read (default: the file system under ``root``, ``$NNX_RUNS``
        or ``./runs``)."""
        base = runs_root(root)
        store = storage if storage is not None else FileStorage(base)
        run_id = resolve_run_id(id, store, where=str(base))
        files = RunFiles(store, run_id)
        try:
            raw = files.storage.read(files.run_yaml)
        except FileNotFoundError as exc:
            raise RunNotFoundError(f"no run {run_id} under {base}; list runs with `nnx runs list`") from exc
        doc = load_yaml(raw, where=f"run {run_id} run.yaml")
        stored_id = doc.pop("id", None)
        run = cls(config=doc, root=base, storage=storage)
        if stored_id != run.id:
            raise CorruptRunError(f"run {run_id}: run.yaml's configuration hashes to {run.id}, not {stored_id}")
        if run.id != run_id:
            raise CorruptRunError(f"run folder {run_id} holds run {run.id}")
        last = files.read_tag(LAST)
        journal = JournalReader.open(files.storage, run_id, None if last is None else last.epoch)
        try:  # a journal run loads its last `retention` committed records; nnx.iter_history streams all
            history = journal.tail() if journal is not None else parse_history(files.storage.read(files.history))
        except FileNotFoundError:
            history = []
        meta = {}
        if files.storage.exists(files.metadata_yaml):
            meta = load_yaml(files.storage.read(files.metadata_yaml), where=f"run {run_id} metadata.yaml")
        return attrs.evolve(
            run, idps=truncate_to_last(history, last), resume_status=meta.get("resume"), data_fingerprint=meta.get("data"),
            precision=meta.get("precision"), compile=meta.get("compile"),
        )

    @classmethod
    def all(
        cls, root: str | os.PathLike[str] | None = None, *, storage: Any = None,
        on_unreadable: Callable[[str, Exception], None] | None = None,
    ) -> list[NNRun]:
        """Every loadable run in the store, by id. An unreadable one is skipped, after
        ``on_unreadable(name, error)`` when given (``nnx runs list`` shows it as a row)."""
        base = runs_root(root)
        store = storage if storage is not None else FileStorage(base)
        runs = []
        for name in store.list(""):
            try:
                if not name.startswith(".") and store.exists(f"{name}/run.yaml"):
                    runs.append(cls.load(name, base, storage=storage))
            except (CorruptRunError, ValueError) as exc:
                if on_unreadable is not None:
                    on_unreadable(name, exc)
        return runs

    def checkpoint(self, tag: str = LAST) -> Checkpoint | None:
        """A committed tag (``last``, ``best``, ``first``, ``q1``..``q3``, custom); None if absent."""
        manifest = self.files().read_tag(validate_tag(str(tag)))
        return None if manifest is None else Checkpoint(run=self, manifest=manifest)

    def tags(self) -> list[str]:
        """Every committed tag."""
        return self.files().tags()

    def committed_records(self) -> Iterator[IterationDataPoint]:
        """Every committed record of this run (epochs ≤ LAST), oldest first: its ``idps.csv``, or
        streamed from its history journal (a loaded journal run holds only the retained tail)."""
        files = self.files()
        last = files.read_tag(LAST)
        reader = JournalReader.open(files.storage, self.id, None if last is None else last.epoch)
        if reader is not None:
            return iter(reader)
        try:
            raw = parse_history(files.storage.read(files.history))
        except FileNotFoundError:
            raw = []
        return iter(truncate_to_last(raw, last))

    @property
    def epochs(self) -> dict[int, IterationDataPoint]:
        """Each committed epoch's last record (validation, summary and decision live there)."""
        return epoch_rows(self.idps)

    # NNx's fields of a run, read back from the configuration its id addresses
    @property
    def model(self) -> NNModelParams:
        """The run's ``NNModelParams``."""
        return NNModelParams.from_state(self.config["model"])

    @property
    def net(self) -> NNParams | None:
        """The run's net shape (``NNParams`` or a subclass such as ``NNConvParams``); None for a
        custom module or a registered ``ModelSpec``."""
        net = self.config.get("net")
        return None if net is None else NNParams.resolve_from_state(net)

    @property
    def train(self) -> NNTrainParams:
        """The run's ``NNTrainParams`` (for a ``Trainer`` run: the representative ones)."""
        return NNTrainParams.from_state(self.config["train"])

    @property
    def trainer(self) -> NNTrainerParams | None:
        """A ``Trainer`` run's ``NNTrainerParams``, else None."""
        trainer = self.config.get("trainer")
        return None if trainer is None else NNTrainerParams.from_state(trainer)

    @property
    def salt(self) -> str | None:
        """The run's salt, if any."""
        return self.config.get("salt")

    def best(self) -> IterationDataPoint | None:
        """The record of the epoch BEST holds, if any."""
        manifest = self.files().read_tag("best")
        return None if manifest is None else self.epoch_record(manifest.epoch)

    def epoch_record(self, epoch: int) -> IterationDataPoint | None:
        """The last record of a committed ``epoch`` (a journal run reads it from its journal)."""
        found = self.epochs.get(epoch)
        if found is None:  # a journal run holds only its last records in memory
            journal = JournalReader.open(self.files().storage, self.id, epoch)
            found = journal.epoch_record(epoch) if journal is not None else None
        return found

    def _repr_html_(self) -> str:
        """The run in a notebook: its configuration and one row per committed epoch
        (``nnx_api.runs.html``)."""
        return run_html(self)

    def plot(self, path: str | os.PathLike[str] | None = None) -> Any:
        """Loss, metric and learning-rate curves per epoch, BEST marked (``nnx_api.runs.plots``, the
        ``plots`` extra): writes ``path`` and returns it, or returns the matplotlib Figure."""
        return plot_run(self, path)
