"""``NNRun``: a run's identity, configuration, committed history and checkpoints on disk, and
``NNCheckpoint``: NNx's handle of one of those checkpoints.

A checkpoint here is a tag manifest (``<run>/checkpoints/<tag>.json``) naming a content-addressed
payload blob whose SHA-256 is checked before it is read; payloads are decoded with PyTorch's
safe loader only (``weights_only=True``): nothing in a checkpoint file can run code. The handle
gives NNx's view of one checkpoint — ``net_params``, ``net_state``, ``model_params``, ``idp`` (the
epoch's last record), ``training_state_present`` — and NNx's static loaders::

    ckpt = NNCheckpoint.load(run=run.id, type=Checkpoints.BEST)
    model = NNModel.from_checkpoint(ckpt)                      # or (checkpoint=ckpt, device="cpu")
    state = NNCheckpoint.load_training_state(run.id, Checkpoints.LAST)   # optimizer, schedule, RNG ...
    point = NNCheckpoint.resume_point(run.id, Checkpoints.LAST)          # checkpoint id, epoch, SHA-256
    first, q1, q2, q3, last = run.checkpoints()                          # None where absent

``from_file`` reads a checkpoint by path: a tag manifest of a run (``.../checkpoints/<tag>.json``;
NNx's ``<tag>.pt`` name of the same tag is accepted, e.g. a ``ModelCheckpoint`` file
``snap_e0.pt``), or a standalone file written by ``to_file`` (that file's format:
``nnx_api.runs.standalone``). Missing files give None, as in NNx. ``NNRun`` and ``NNCheckpoint``
share this module because each builds the other (``run.checkpoints()``, ``NNCheckpoint.load(run)``);
how a run prints (``str(run)``) lives in ``nnx_api.runs.summary``.

Reading a run (``load``, ``all``, its history and BEST) needs no torch: torch is imported where a
blob is decoded (``nnx_adapters.pytorch.state``) or a run's params are built (``nnx_api.config.params``,
``nnx_api.config.train_params``), so ``nnx runs list`` starts without it.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from nnx_core import replacement
from nnx_core.admission import attempt_now
from nnx_core.commit import BEST, LAST, RunFiles, complete_epoch, iter_committed, position_of, read_history
from nnx_core.compilation import CompileRecord
from nnx_core.dataclass_view import expose_dataclass_fields
from nnx_core.eager_history import EagerHistory, epoch_rows
from nnx_core.errors import CorruptRunError, ParamsError, RunNotFoundError
from nnx_core.identity import run_id as content_address
from nnx_core.identity import validate_run_id, validate_tag
from nnx_core.journal_format import HISTORY_FOLDER
from nnx_core.journal_reader import JournalReader, has_journal
from nnx_core.precision import ResolvedPrecision
from nnx_core.records import IterationDataPoint
from nnx_core.resume import ResumeStatus
from nnx_adapters.storage.fs import FileStorage
from nnx_api.config.identity import run_config
from nnx_api.runs.checkpoint import NNCheckpointTransform, transforms_of
from nnx_api.runs.hints import checked_tag, edited_fields, load_arguments, refuse_run_folder, tag_argument
from nnx_api.runs.html import run_html
from nnx_api.runs.partial import PartialEpoch, committed_journal, complete_records, split_partial
from nnx_api.runs.payload import CheckpointPayload, Payload
from nnx_api.runs.plots import plot_run
from nnx_api.runs.records import Records, as_records, checked_records, refuse_truncated_history
from nnx_api.runs.standalone import read_checkpoint_file, write_checkpoint_file
from nnx_api.runs.store import dump_yaml, environment, load_yaml, resolve_run_id, run_folders, run_not_found, runs_root
from nnx_api.runs.summary import run_summary
from nnx_api.runs.tag import Checkpoint

if TYPE_CHECKING:
    from nnx_api.config.params import NNModelParams, NNParams
    from nnx_api.config.train_params import NNTrainerParams, NNTrainParams

PHASE_TAGS = ("first", "q1", "q2", "q3", LAST)  # NNRun.checkpoints(): NNx's phase order, BEST excluded


def _params_config(train: Any, model: Any, net: Any, trainer: Any, salt: str | None) -> dict[str, Any]:
    """The run configuration of ``NNRun(train=..., model=..., net=...)`` (as ``NNModel.run_config``)."""
    from nnx_api.config.params import ModelSpec

    if model is None or (train is None and trainer is None):
        raise ParamsError("NNRun", "needs config=..., or train= (or trainer=) and model= (with net= for a built-in net)")
    if net is None and not isinstance(model.net, ModelSpec):
        raise ParamsError("NNRun.net", "a built-in net's run is named by its NNParams; a module of your own by the module: "
                          "use NNModel(...).run_config(params, salt)")
    model_state = {"model": model.state(), **({"net": net.state()} if net is not None else {})}
    train_state = (trainer.representative() if trainer is not None else train).state()
    return run_config(model_state, train_state, salt, trainer=None if trainer is None else trainer.state())


@attrs.frozen(kw_only=True, init=False)
class NNRun:
    """A run: id (content address of ``config``), configuration, history, and where it lives.

    ``NNRun.load(id)`` shows committed state only: ``idps`` the epochs committed whole, ``partial``
    the epoch a mid-epoch LAST commits in part (``nnx_api.runs.partial``), nothing newer than LAST.
    ``storage`` is the store the run lives in (default: the file system under ``root``).
    ``code_fingerprint`` names the user code it was last admitted with (metadata.yaml's ``code``;
    ``nnx_api.training.code``), None for a run that predates it or used only NNx's own code.
    ``data_fingerprint`` is what its loaders yielded when it was last admitted (metadata.yaml's
    ``data``; ``nnx_api.training.fingerprint``), None for a run that predates fingerprints.
    ``compile`` is the ``CompileRecord`` of its latest attempt when that attempt asked for
    ``train(compile=...)`` (metadata.yaml's ``compile``), else None; never part of the id.
    ``trained`` says what trained it, outside the id: net, update owner, loss (run.yaml's
    ``trained``; ``nnx_api.training.code.trained``), None for a run that predates it.
    """

    config: Mapping[str, Any]
    root: Path = attrs.field(converter=Path)
    idps: Records = attrs.field(default=Records(), converter=as_records, repr=False)
    partial: PartialEpoch | None = attrs.field(default=None, repr=False)
    resume_status: ResumeStatus | None = attrs.field(default=None, converter=ResumeStatus.coerce)
    precision: ResolvedPrecision | None = attrs.field(default=None, converter=ResolvedPrecision.coerce, eq=False)
    storage: Any = attrs.field(default=None, eq=False, repr=False)
    data_fingerprint: Mapping[str, Any] | None = attrs.field(default=None, eq=False, repr=False)
    code_fingerprint: Mapping[str, Any] | None = attrs.field(default=None, eq=False, repr=False)
    compile: CompileRecord | None = attrs.field(default=None, converter=CompileRecord.coerce, eq=False)
    trained: Mapping[str, str] | None = attrs.field(default=None, eq=False, repr=False)
    folder: str | None = attrs.field(default=None, eq=False, repr=False)  # read from here, not <id>/ (a run kept aside)
    id: str = attrs.field(init=False)

    def __init__(
        self, *, config: Mapping[str, Any] | None = None, root: Any = None, train: NNTrainParams | None = None,
        model: NNModelParams | None = None, net: NNParams | None = None, trainer: NNTrainerParams | None = None,
        salt: str | None = None, **fields: Any,
    ) -> None:
        """``NNRun(config=..., root=...)``, or NNx's spelling ``NNRun(train=..., model=..., net=...)``
        (``trainer=``, ``salt=`` as ``train()`` takes them) for the run those params would make;
        ``root`` defaults to the runs root (``./runs`` or ``$NNX_RUNS``)."""
        if config is None:
            config = _params_config(train, model, net, trainer, salt)
        elif any(given is not None for given in (train, model, net, trainer, salt)):
            raise ParamsError("NNRun", "give either config=... or the params (train=, model=, net=), not both")
        self.__attrs_init__(config=config, root=runs_root() if root is None else root, **fields)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "id", content_address(self.config))

    def __str__(self) -> str:
        """The configuration in one line, laid out as NNx prints a run (``repr`` is the full record)."""
        return run_summary(self.config)

    @property
    def path(self) -> Path:
        """``<root>/<id>`` (while a replacement of the run has not committed: the folder it is kept in)."""
        return self.root / (self.folder or self.id)

    def state(self) -> dict[str, Any]:
        """``{"id": ..., **config, "trained": ...}`` — run.yaml (``load`` hashes it without ``trained``); a
        copy: changing it changes nothing of the run."""
        return copy.deepcopy({"id": self.id, **self.config, **({"trained": dict(self.trained)} if self.trained else {})})

    def with_idps(self, idps: Any) -> NNRun:
        """A copy of this run holding the records ``idps`` (IterationDataPoints); nothing is written
        (``save()`` writes them, and ``NNRun.load`` shows only what LAST committed of them)."""
        return attrs.evolve(self, idps=checked_records(idps, "NNRun.with_idps"))

    def with_resume_status(self, status: Any) -> NNRun:
        """A copy of this run with this ``ResumeStatus`` (or its state, or None); nothing is written."""
        return attrs.evolve(self, resume_status=status)

    def with_precision(self, precision: Any) -> NNRun:
        """A copy of this run with this ``ResolvedPrecision`` (or its state, or None); nothing is written."""
        return attrs.evolve(self, precision=precision)

    def with_compile(self, record: Any) -> NNRun:
        """A copy of this run with this ``CompileRecord`` (or its state, or None); nothing is written."""
        return attrs.evolve(self, compile=record)

    def files(self) -> RunFiles:
        """This run's files over its store."""
        return RunFiles(self.storage if self.storage is not None else FileStorage(self.root), self.id, self.folder)

    def save(self, root: str | os.PathLike[str] | None = None, *, eager_history: bool | None = None,
             update_best: bool = True) -> NNRun:
        """Write run.yaml, metadata.yaml and, for an eager run, idps.csv (each replaced atomically);
        this run. ``root``: save under another runs root (an eager run's files only: checkpoints
        stay where training committed them). A journal run's ``idps`` are its retained tail, so it
        writes no idps.csv (``eager_history=True`` is refused) and saves under its own root only.
        ``update_best`` is accepted for NNx's code: there is no cross-run ``runs/best`` here."""
        files = self.files()
        journal = has_journal(files.storage, self.id, files.root)
        if journal and eager_history:
            raise ParamsError("NNRun.save", f"run {self.id[:8]} keeps its history in a journal: its idps are the retained "
                              "tail, not the whole history; save(eager_history=False), nnx.iter_history for every record")
        if root is not None and Path(root).resolve() != self.root.resolve():
            if journal:
                raise ParamsError("NNRun.save.root", f"run {self.id} keeps its history in the journal at {self.history}, "
                                  f"not under {root}: save it from its own runs root, or export the history with "
                                  "nnx.export_history_csv")
            files = RunFiles(FileStorage(Path(root)), self.id)
        write_history = not journal if eager_history is None else eager_history
        files.storage.write(files.run_yaml, dump_yaml(self.state()))
        files.storage.write(files.metadata_yaml, dump_yaml(self.metadata()))
        if write_history:
            files.storage.write(files.history, EagerHistory(self.idps).render())
        return self

    def metadata(self) -> dict[str, Any]:
        """The environment record, plus the resume outcome, the data fingerprint, the precision and
        the compile record when there are."""
        meta = environment()
        if self.resume_status:
            meta["resume"] = self.resume_status.state()
        if self.data_fingerprint:
            meta["data"] = dict(self.data_fingerprint)
        if self.code_fingerprint is not None:  # {} too: NNx's own code only, so a step given later is a change
            meta["code"] = {role: dict(v) for role, v in self.code_fingerprint.items()}
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
        or ``./runs``). An ``NNRun`` stands for its id (and its root); a hex id matches in any case."""
        id, root = load_arguments(id, root, storage, NNRun)  # noqa: A001 - NNx's name of the argument
        base = runs_root(root)
        store = storage if storage is not None else FileStorage(base)
        run_id = resolve_run_id(id, store, where=str(base))
        folder = replacement.reading_folder(store, run_id)  # a replacement not yet committed: the run kept aside
        files = RunFiles(store, run_id, folder)
        try:
            raw = files.storage.read(files.run_yaml)
        except FileNotFoundError as exc:
            raise run_not_found(run_id, base, look=storage is None) from exc
        doc = load_yaml(raw, where=f"run {run_id} run.yaml")
        stored_id, trained = doc.pop("id", None), doc.pop("trained", None)
        run = cls(config=doc, root=base, storage=storage, folder=None if folder == run_id else folder, trained=trained)
        if stored_id != run.id:
            raise CorruptRunError(f"run {run_id}: run.yaml's configuration hashes to {run.id}, not {stored_id}{edited_fields(run)}")
        if run.id != run_id:
            raise CorruptRunError(f"run folder {run_id} holds run {run.id}")
        last = files.read_tag(LAST)
        journal = committed_journal(files.storage, run_id, last, files.root)
        # a journal run loads its last `retention` committed records; nnx.iter_history streams all
        history = journal.tail() if journal is not None else read_history(files, last)
        if journal is None:
            refuse_truncated_history(files, last, history)
        if journal is None and last is not None and not history and not files.storage.exists(files.history):
            warnings.warn(
                f"run {run_id[:8]}: its history (idps.csv) is missing, though LAST committed epoch {last.epoch}: no "
                f"records to show (the checkpoints are intact). `nnx runs verify {run_id[:8]}` reports it; resume='auto' "
                "refuses to continue the run until idps.csv is back", RuntimeWarning, stacklevel=2,
            )
        has_meta = files.storage.exists(files.metadata_yaml)
        meta = load_yaml(files.storage.read(files.metadata_yaml), where=f"run {run_id} metadata.yaml") if has_meta else {}
        complete, partial = split_partial(iter_committed(history, last), last)
        return attrs.evolve(
            run, idps=complete, partial=partial, resume_status=meta.get("resume"), data_fingerprint=meta.get("data"),
            code_fingerprint=meta.get("code"), precision=meta.get("precision"), compile=meta.get("compile"),
        )

    @classmethod
    def all(
        cls, root: str | os.PathLike[str] | None = None, *, storage: Any = None,
        on_unreadable: Callable[[str, Exception], None] | None = None,
    ) -> list[NNRun]:
        """Every loadable run in the store, by id. An unreadable one is skipped, after
        ``on_unreadable(name, error)`` when given (``nnx runs list`` shows it as a row)."""
        base = refuse_run_folder(runs_root(root), storage)  # a run's folder is no runs root: say which is
        store = storage if storage is not None else FileStorage(base)
        runs = []
        for name in run_folders(store):
            try:
                if store.exists(f"{name}/run.yaml") or store.exists(f"{replacement.aside(name)}/run.yaml"):
                    runs.append(cls.load(name, base, storage=storage))
            except (CorruptRunError, ValueError) as exc:
                if on_unreadable is not None:
                    on_unreadable(name, exc)
        return runs

    def checkpoint(self, tag: str = LAST) -> Checkpoint | None:
        """A committed tag (``last``, ``best``, ``first``, ``q1``..``q3``, custom); None if absent."""
        manifest = self.files().read_tag(validate_tag(str(tag_argument(tag, call=None))))
        return None if manifest is None else Checkpoint(run=self, manifest=manifest)

    def require_checkpoint(self, tag: str = LAST) -> Checkpoint:
        """A committed tag, or ``RunNotFoundError`` naming the tags there are and, for a missing
        ``best``, why: BEST is written only by an epoch that improves on the best so far, and a
        continuation starts from its source's best (its epochs may never improve on it)."""
        found = self.checkpoint(tag)
        if found is not None:
            return found
        tags = self.tags()
        message = f"run {self.id} has no committed {tag!r} checkpoint (tags: {', '.join(tags) or 'none'})"
        if tag == BEST and LAST in tags:
            parent = (self.config.get("train") or {}).get("parent_run_id")
            message += (
                f": it continues run {parent}, and none of its epochs improved on the best it started from; that best "
                f"is run {parent}'s 'best' (NNModel.from_checkpoint({parent!r}, 'best')), and this run's newest is 'last'"
                if parent else
                ": BEST is written only by an epoch that improves on the best so far, and none did (a monitored value "
                "that was never finite), or its write did not complete (`nnx runs verify` reports that); this run's "
                "newest is 'last'"
            )
        raise RunNotFoundError(message)

    def checkpoints(self, root: str | os.PathLike[str] | None = None) -> list[NNCheckpoint | None]:
        """NNx's phase checkpoints ``[FIRST, Q1, Q2, Q3, LAST]`` as ``NNCheckpoint`` handles, None
        where a tag is absent (BEST is not among them: ``checkpoint("best")``). ``root``: read this
        run from another runs root (default: where this run lives)."""
        run = self if root is None else NNRun.load(self.id, root)
        return [NNCheckpoint.load(run, tag) for tag in PHASE_TAGS]

    def tags(self) -> list[str]:
        """Every committed tag."""
        return self.files().tags()

    def attempt(self) -> dict[str, Any] | None:
        """The run's latest attempt record (``attempt.json``) as it stands now, None when there is
        none: ``status`` is "interrupted" for a "running" record whose writer is gone (killed, or
        stopped with Ctrl-C: nobody holds the run's lease), and ``last_committed_epoch`` / ``_position``
        are LAST's — what ``nnx runs list / show`` say (``nnx_core.admission.attempt_now``, the one reader)."""
        return attempt_now(self.files())

    def committed_records(self, *, partial: bool = False) -> Iterator[IterationDataPoint]:
        """Every committed record of this run's complete epochs, oldest first: its ``idps.csv``, or
        streamed from its history journal (a loaded journal run holds only the retained tail).
        ``partial=True`` adds a mid-epoch LAST's committed records of its epoch (``self.partial``)."""
        files = self.files()
        last = files.read_tag(LAST)
        reader = committed_journal(files.storage, self.id, last, files.root)
        records = iter_committed(reader if reader is not None else read_history(files, last), last)
        return records if partial else complete_records(records, last)

    @property
    def epochs(self) -> dict[int, IterationDataPoint]:
        """Each committed epoch's last record (validation, summary and decision live there)."""
        return epoch_rows(self.idps)

    # NNx's fields of a run, read back from the configuration its id addresses
    @property
    def model(self) -> NNModelParams:
        """The run's ``NNModelParams``."""
        from nnx_api.config.params import NNModelParams

        return NNModelParams.from_state(self.config["model"])

    @property
    def net(self) -> NNParams | None:
        """The run's net shape (``NNParams`` or a subclass such as ``NNConvParams``); None for a
        custom module or a registered ``ModelSpec``."""
        from nnx_api.config.params import NNParams

        net = self.config.get("net")
        return None if net is None else NNParams.resolve_from_state(net)

    @property
    def train(self) -> NNTrainParams:
        """The run's ``NNTrainParams`` (for a ``Trainer`` run: the representative ones)."""
        from nnx_api.config.train_params import NNTrainParams

        return NNTrainParams.from_state(self.config["train"])

    @property
    def trainer(self) -> NNTrainerParams | None:
        """A ``Trainer`` run's ``NNTrainerParams``, else None."""
        from nnx_api.config.train_params import NNTrainerParams

        trainer = self.config.get("trainer")
        return None if trainer is None else NNTrainerParams.from_state(trainer)

    @property
    def salt(self) -> str | None:
        """The run's salt, if any."""
        return self.config.get("salt")

    @property
    def history(self) -> str | None:
        """The folder of the run's history journal (``history=nnx.HistoryJournal(...)``) as a path
        string, None for an eager run (its history is ``idps.csv``)."""
        files = self.files()
        return str((self.path / HISTORY_FOLDER).absolute()) if has_journal(files.storage, self.id, files.root) else None

    def lost_best(self) -> int | None:
        """The epoch the history names as the monitor's best when ``checkpoints/best.json`` is
        missing (deleted: BEST's weights are gone), else None. A journal run's history beyond its
        window is not read (its retained records decide)."""
        if self.files().read_tag("best") is not None:
            return None
        improved = [r.epoch_idx for r in self.epochs.values() if r.selection is not None and r.selection.improved]
        return improved[-1] if improved else None

    def best(self) -> IterationDataPoint | None:
        """The record of the epoch BEST holds, if any."""
        manifest = self.files().read_tag("best")
        return None if manifest is None else self.epoch_record(manifest.epoch)

    def epoch_record(self, epoch: int) -> IterationDataPoint | None:
        """The last record of a complete ``epoch`` (a journal run reads it from its journal); None
        for the epoch a mid-epoch LAST commits in part."""
        if self.partial is not None and epoch >= self.partial.epoch:
            return None
        found = self.epochs.get(epoch)
        if found is None:  # a journal run holds only its last records in memory
            files = self.files()
            journal = JournalReader.open(files.storage, self.id, epoch, files.root)
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


@attrs.frozen(kw_only=True)
class NNCheckpoint:
    """One checkpoint of a run: the net's shape (None for a custom module), its weights, the
    model params, the record of the epoch it holds, and whether it carries training state
    (optimizer, schedule, RNG: a stateful resume point) or only weights (``ModelCheckpoint``)."""

    net_params: NNParams | None
    net_state: Mapping[str, Any] = attrs.field(repr=False, eq=False)  # tensors: equality ignores them
    model_params: NNModelParams
    idp: IterationDataPoint | None
    transforms: tuple[NNCheckpointTransform, ...] = ()
    training_state_id: str | None = None
    training_state_present: bool | None = None
    run_id: str | None = None
    tag: str | None = None
    epoch: int | None = None
    module_signature: Mapping[str, Any] | None = attrs.field(default=None, repr=False)

    @property
    def reconstructible(self) -> bool:
        """Whether a model can be rebuilt from this checkpoint alone (a built-in net, or a
        registered ``ModelSpec`` its factory rebuilds); a custom module's weights need the module
        again: ``NNModel.from_checkpoint(ckpt, module=...)``."""
        from nnx_api.config.params import ModelSpec

        return self.net_params is not None or isinstance(self.model_params.net, ModelSpec)

    # ------------------------------------------------------------------ loaders
    @staticmethod
    def load(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, map_location: Any = "cpu",
        *, storage: Any = None,
    ) -> NNCheckpoint | None:
        """The committed checkpoint ``type`` (a ``Checkpoints`` member or a tag name) of ``run``
        (an id or an ``NNRun``), its blob verified; None when the run or the tag does not exist."""
        found = _committed(run, type, root, storage)
        return None if found is None else NNCheckpoint.of(found)

    @staticmethod
    def of(checkpoint: Checkpoint) -> NNCheckpoint:
        """The handle of a committed ``Checkpoint`` (``run.checkpoint(tag)``)."""
        payload = checkpoint.contents()
        run = checkpoint.run
        stateful = payload.stateful
        return NNCheckpoint(
            net_params=run.net,
            net_state=payload.weights,
            model_params=run.model,
            idp=run.epoch_record(checkpoint.epoch),
            transforms=transforms_of(payload.transforms if isinstance(payload, CheckpointPayload) else ()),
            training_state_id=checkpoint.manifest.blobs["state"].sha256 if stateful else None,
            training_state_present=stateful,
            run_id=run.id,
            tag=checkpoint.tag,
            epoch=checkpoint.epoch,
            module_signature=run.config.get("module"),
        )

    @staticmethod
    def load_training_state(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, map_location: Any = "cpu",
        *, storage: Any = None,
    ) -> dict[str, Any] | None:
        """The checkpoint's training state — ``optimizer``, ``scheduler``, ``rng``,
        ``components``, ``completed_epoch``, ``update_count`` — decoded safely from its verified
        blob; None when the run or tag does not exist or the checkpoint holds weights only."""
        found = _committed(run, type, root, storage)
        return None if found is None else _training_state(found.contents())

    @staticmethod
    def load_with_training_state(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, map_location: Any = "cpu",
        *, storage: Any = None,
    ) -> tuple[NNCheckpoint | None, dict[str, Any] | None]:
        """``(load(...), load_training_state(...))`` read from one verified blob."""
        found = _committed(run, type, root, storage)
        if found is None:
            return None, None
        return NNCheckpoint.of(found), _training_state(found.contents())

    @staticmethod
    def load_optimizer_state(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, *, storage: Any = None,
    ) -> Mapping[str, Any] | None:
        """The optimizer part of the training state, None when there is none."""
        state = NNCheckpoint.load_training_state(run, type, root, storage=storage)
        return None if state is None else state.get("optimizer")

    @staticmethod
    def resume_point(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, *, storage: Any = None,
    ) -> dict[str, Any] | None:
        """What stamps this resume point, read from its tag manifest without loading the payload:
        ``checkpoint_id`` (the payload's SHA-256, also its ``generation``), ``completed_epoch`` (held
        whole), ``position`` (a mid-epoch LAST's, else None), ``committed_updates``, ``weights_only``
        and the ``files`` with their SHA-256 and size; None when the run or tag does not exist."""
        found = _committed(run, type, root, storage)
        if found is None:
            return None
        manifest = found.manifest
        ref = manifest.blobs["state"]
        return {
            "run_id": manifest.run_id,
            "tag": manifest.tag,
            "checkpoint_id": ref.sha256,
            "generation": ref.sha256,
            "completed_epoch": complete_epoch(manifest),
            "position": None if (at := position_of(manifest)) is None else {"epoch": manifest.epoch, **at.state()},
            "committed_updates": manifest.meta.get("update_count"),
            "weights_only": bool(manifest.meta.get("weights_only", False)),
            "files": {name: {"sha256": r.sha256, "size": r.size} for name, r in manifest.blobs.items()},
        }

    @staticmethod
    def verify(
        run: str | NNRun, type: Any = LAST, root: str | os.PathLike[str] | None = None, *, storage: Any = None,
    ) -> dict[str, Any] | None:
        """Check the checkpoint's blobs against their SHA-256 (hashed in place, nothing decoded)
        and return its ``resume_point``; ``CorruptRunError`` names a missing or damaged blob,
        ``StaleCheckpointError`` one a commit released after the tag was read (verify again)."""
        found = _committed(run, type, root, storage)
        if found is None:
            return None
        files = found.run.files()
        for ref in found.manifest.blobs.values():
            files.verify_blob(ref)
        return NNCheckpoint.resume_point(found.run, found.tag, storage=storage)

    # ------------------------------------------------------------------ files
    @staticmethod
    def from_file(path: str | os.PathLike[str], map_location: Any = "cpu") -> NNCheckpoint | None:
        """The checkpoint at ``path``: a run's tag (``<root>/<run>/checkpoints/<tag>.json``, or
        NNx's ``<tag>.pt`` name for it) or a standalone ``to_file`` file
        (``nnx_api.runs.standalone``). None when nothing is there; a file that is neither is
        refused with ``CorruptRunError`` (never unpickled)."""
        path = Path(path)
        tag_file = path.with_suffix(".json")
        # a run's tag, by either name, is read from its verified manifest and blob: a ModelCheckpoint
        # <tag>.pt beside it is an export for users (nnx_api.callbacks.exports), never read back here
        if path.parent.name == "checkpoints" and (path.suffix in (".json", ".pt") or not path.exists()) and tag_file.is_file():
            run_dir = path.parent.parent
            return NNCheckpoint.load(validate_run_id(run_dir.name), validate_tag(path.stem), run_dir.parent)
        if not path.is_file():
            return None
        return NNCheckpoint(**read_checkpoint_file(path, map_location))

    def to_file(self, path: str | os.PathLike[str], format: str = "nnx") -> Path:
        """Write this checkpoint (weights, params, record; no training state) as one standalone
        file that ``from_file`` reads back (``nnx_api.runs.standalone``): ``format="pickle"``
        (NNx's default name; also ``"nnx"``) writes the safe-loader file, nothing here ever needs
        an unpickling loader; ``"safetensors"`` NNx's portable safetensors layout (tensors only;
        a runtime-only module's checkpoint is refused, as NNx refuses it)."""
        return write_checkpoint_file(self, path, format)


# dataclasses.fields() / asdict() / replace() work on it as on NNx's: NNx's fields first, then ours
expose_dataclass_fields(
    NNCheckpoint,
    ("net_params", "net_state", "model_params", "idp", "transforms", "training_state_id", "training_state_present"),
)


def _committed(run: str | NNRun, type: Any, root: Any, storage: Any) -> Checkpoint | None:
    """The committed checkpoint, or None when the run or the tag does not exist."""
    tag = checked_tag(run, type, root, call="NNCheckpoint.load")  # (root, id) and (id, root) said
    if isinstance(run, NNRun):
        return run.checkpoint(tag)
    try:
        loaded = NNRun.load(run, root, storage=storage)
    except RunNotFoundError:
        return None
    return loaded.checkpoint(tag)


def _training_state(payload: Payload) -> dict[str, Any] | None:
    """The training-state view of a payload; None for a weights-only one."""
    return payload.training_state() if isinstance(payload, CheckpointPayload) else None


__all__ = ["Checkpoint", "NNCheckpoint", "NNRun"]
