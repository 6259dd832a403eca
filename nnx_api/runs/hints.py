"""The arguments a reader of runs is given, checked for the mistakes of the whole class, and the
hint an error carries so that each audience reads its own fix.

* A run id: an ``NNRun`` stands for its id; another object is refused by its type (never its whole
  repr); a hex id is matched case-insensitively (``resolve_id``); a path where the id belongs is
  said: a run's folder (``NNRun.load('<id>', root='<root>')``), or the arguments swapped
  (``swapped``: the root given first and the id second).
* A checkpoint tag that is a path (``tag_argument``): the runs root given by position where the
  tag belongs; the root is keyword-only (``root=...``).
* Where a run is: ``enclosing_run`` walks a path's ancestors to the run folder it lies in, at any
  depth (``<run>/checkpoints`` is inside run ``<run>``).
* An edited run.yaml (``edited_fields``): its parts read back through the params' own checks, so
  the content-hash refusal also names a field that no longer passes them.

An error that says where a run is carries a ``Where`` (``error.where``): what went wrong, the run
id and the runs root to pass. Its message speaks Python (``root=...``); the ``nnx`` command line
renders the same ``Where`` as the command to type (``nnx runs show ID --root DIR``: ``cli_text``).
The attribute is in the error's ``__dict__``, so it survives pickling.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from nnx_core.errors import InvalidRunIdError, ParamsError, RunNotFoundError
from nnx_core.identity import validate_tag

_HEX = re.compile(r"[0-9A-Fa-f]+")


@attrs.frozen
class Where:
    """What went wrong (without the fix), the run id to name and the runs root to pass (None:
    not known; the fix is "the root the run was trained with")."""

    what: str
    run_id: str | None = None
    root: str | None = None


def located(error: Exception, what: str, run_id: str | None = None, root: Any = None) -> Exception:
    """``error`` carrying ``Where(what, run_id, root)`` as ``error.where``."""
    error.where = Where(what, run_id, None if root is None else str(root))  # type: ignore[attr-defined]
    return error


def enclosing_run(path: Any) -> Path | None:
    """The run folder (a folder holding ``run.yaml``) that ``path`` is or lies inside, at any depth;
    None when there is none. Only names are looked at."""
    try:
        folder = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
        for candidate in (folder, *folder.parents):
            if (candidate / "run.yaml").is_file():
                return candidate
    except (OSError, TypeError, ValueError):
        return None
    return None


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error never prints a whole object."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def id_argument(value: Any, *, call: str = "NNRun.load") -> Any:
    """The run id ``value`` stands for: a string, or a path as a string; a value of another
    type is ``InvalidRunIdError`` naming its type (and ``run.id`` when it has one). ``NNRun.load``
    takes the ``NNRun`` itself before this (``load_arguments``)."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, str):
        return value
    has_id = isinstance(getattr(value, "id", None), str) or isinstance(getattr(value, "run_id", None), str)
    raise InvalidRunIdError(
        f"{call}: the run id must be a string (the id `nnx runs list` prints), got a {type(value).__name__}"
        + (": pass run.id" if has_id else f" ({short(value)})")
    )


def resolve_case(run_id: str, exists: Any) -> str:
    """A hex id in another case than the runs' (ids are lowercase hex): lowercased, unless a folder of
    exactly that name exists."""
    if _HEX.fullmatch(run_id) and run_id != run_id.lower() and not exists(run_id):
        return run_id.lower()
    return run_id


def _is_path(value: Any) -> bool:
    return isinstance(value, os.PathLike) or (isinstance(value, str) and ("/" in value or os.sep in value))


def _looks_like_id(value: Any) -> bool:
    return isinstance(value, str) and bool(_HEX.fullmatch(value)) and len(value) >= 4


def swapped(first: Any, second: Any, *, call: str = "NNRun.load") -> None:
    """Refuse ``call(root, id)``: a path given where the run id belongs while the root's place holds
    an id (``InvalidRunIdError``: the arguments are swapped)."""
    if _is_path(first) and enclosing_run(first) is None and _looks_like_id(second):
        raise InvalidRunIdError(
            f"{call}({short(os.fspath(first))}, {second!r}): the arguments are swapped: the run id comes first and the "
            f"runs root is a keyword: {call}({second!r}, root={os.fspath(first)!r})"
        )


def load_arguments(run_id: Any, root: Any, storage: Any, run_type: type) -> tuple[Any, Any]:
    """``(id, root)`` of ``NNRun.load(id, root)``: a run (a ``run_type``) given as the id stands for
    its id (and, with no root or store given, its root); a root and an id swapped are refused."""
    if isinstance(run_id, run_type):
        return run_id.id, run_id.root if root is None and storage is None else root
    swapped(run_id, root, call="NNRun.load")
    return run_id, root


def refuse_run_folder(base: Path, storage: Any) -> Path:
    """``base``, the runs root ``NNRun.all`` reads; one that is (inside) a run's folder is
    ``RunNotFoundError`` naming the root to pass (a run folder holds no runs)."""
    folder = enclosing_run(base) if storage is None else None
    if folder is not None:
        inside = "" if Path(os.path.abspath(base)) == folder else "inside "
        what = f"no runs under {base}: it is {inside}the folder of run {folder.name}, not a runs root"
        raise located(RunNotFoundError(f"{what}; the runs root is the folder that holds it: "
                                       f"NNRun.all(root={str(folder.parent)!r})"), what, None, folder.parent)
    return base


def checked_tag(run: Any, tag: Any, root: Any, *, call: str) -> str:
    """The tag name of ``call(run, tag, root)`` (a ``Checkpoints`` member or a name), the
    arguments swapped or the root given where the tag belongs refused first."""
    swapped(run, root, call=call)
    tag_argument(tag, run, call=call)
    return validate_tag(str(getattr(tag, "value", tag)))


def tag_argument(tag: Any, run: Any = None, *, call: str | None = "NNModel.from_checkpoint") -> Any:
    """Refuse a checkpoint tag that is a path: the runs root given by position where the tag
    belongs (``InvalidRunIdError``: root is keyword-only). ``call`` None: the caller takes no root."""
    if not _is_path(tag):
        return tag
    path = os.fspath(tag)
    if call is None:
        raise InvalidRunIdError(f"checkpoint tag {path!r} is a path: a tag is a name such as 'best' or 'last' "
                                "(`nnx runs show ID` lists a run's tags)")
    named = "ID" if not isinstance(run, str) else repr(run)
    if Path(path).is_file():
        raise InvalidRunIdError(
            f"checkpoint tag {path!r} is a file: a tag is a name such as 'best' or 'last' (a checkpoint file is read "
            f"with NNCheckpoint.from_file({path!r}))"
        )
    raise InvalidRunIdError(
        f"checkpoint tag {path!r} is a path: the second argument is the tag ('best', 'last', ...) and the runs root "
        f"is {'keyword-only' if call == 'NNModel.from_checkpoint' else 'given by keyword'}: {call}({named}, root={path!r})"
    )


def cli_text(error: Exception, command: str, ids: list[str], output: str | None = None) -> str:
    """The message of ``error`` on the command line: its ``Where`` rendered as the ``nnx`` command
    to type (``--root DIR``), else its message as it is."""
    where = getattr(error, "where", None)
    if not isinstance(where, Where):
        return str(error)
    words = ["nnx", "runs", command]
    if command != "list":
        chosen = [where.run_id] if where.run_id and len(ids) <= 1 else ids
        words += [shlex.quote(i) for i in chosen]
    if output is not None:
        words.append(shlex.quote(output))
    if where.root is None:
        return f"{where.what}; pass the root the run was trained in: {' '.join(words)} --root DIR (or set $NNX_RUNS)"
    return f"{where.what}: the runs root is {where.root}: {' '.join(words)} --root {shlex.quote(where.root)}"




WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")  # files that may hold a state dict


def pretrained_source(source: Any) -> Any:
    """``load_pretrained``'s ``source``, refused (``ParamsError``) before anything is read when it
    is a file that holds no weights: a file of a run's folder (its tag manifest, run.yaml, history:
    the run's weights are read with ``NNModel.from_checkpoint``), or a text file."""
    if not isinstance(source, (str, os.PathLike)) or not Path(source).is_file():
        return source
    path = Path(source)
    suffix = path.suffix.lower()
    folder = enclosing_run(path.parent)
    if folder is not None and suffix not in WEIGHT_SUFFIXES:
        tagged = path.parent.name == "checkpoints" and suffix == ".json"
        tag = path.stem if tagged else "best"
        what = f"run {folder.name}'s {tag!r} tag file" if tagged else f"a file of run {folder.name} ({path.name})"
        raise ParamsError("load_pretrained.source", (
            f"{str(source)!r} is {what}, not a state dict; the run's weights load with "
            f"NNModel.from_checkpoint({folder.name!r}, {tag!r}, root={str(folder.parent)!r}) "
            f"(into this model: model.load_pretrained(NNModel.from_checkpoint(...).net))"))
    if suffix in (".json", ".yaml", ".yml", ".csv", ".txt", ".md", ".jsonl"):
        raise ParamsError("load_pretrained.source", f"{str(source)!r} is a {suffix} file, not a state dict; "
                          "load_pretrained reads a state dict saved with torch.save, or a .safetensors file")
    return source


__all__ = [
    "Where", "checked_tag", "cli_text", "enclosing_run", "id_argument", "load_arguments", "located", "resolve_case",
    "refuse_run_folder",
    "pretrained_source", "swapped", "tag_argument",
]


def edited_fields(run: Any) -> str:
    """What an edited run.yaml's configuration gets wrong, read back through the params' own
    checks (``run.model``, ``.net``, ``.train``, ``.trainer``): ``"; it fails its own checks:
    train: NNTrainParams.n_epochs: must be …"``, or "" when every part still reads. Said next to
    the content-hash refusal, which alone cannot name a field."""
    said = []
    for part in ("model", "net", "train", "trainer"):
        if isinstance(run.config.get(part), Mapping):
            try:
                getattr(run, part)
            except ParamsError as error:
                said.append(f"{part}: {error.detail}")
    return f"; it fails its own checks: {'; '.join(said)}" if said else ""
