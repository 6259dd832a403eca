"""The runs root and the small file formats of a run folder: YAML (safe, sorted keys), the
environment record of metadata.yaml, and run-id prefixes."""

from __future__ import annotations

import io
import os
import platform
import sys
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from nnx_core import replacement
from nnx_core.errors import CorruptRunError, InvalidRunIdError, ParamsError, RunNotFoundError
from nnx_core.identity import ID_HEX_DIGITS, validate_run_id
from nnx_api.runs.hints import enclosing_run, id_argument, located, resolve_case

ENV_ROOT = "NNX_RUNS"


def runs_root(root: str | os.PathLike[str] | None = None) -> Path:
    """The runs root: ``root``, else ``$NNX_RUNS``, else ``./runs``; a leading ``~`` is the home
    folder, as in a shell. An empty ``root`` names no folder and is refused (``ParamsError``)."""
    chosen = root if root is not None else os.environ.get(ENV_ROOT, "runs")
    if not os.fspath(chosen).strip():
        raise ParamsError("root" if root is not None else f"${ENV_ROOT}", "is empty; pass root=None for the default "
                          "(./runs, or $NNX_RUNS when set) or the path of a folder")
    path = Path(os.path.expanduser(os.fspath(chosen)))
    if path.is_file():
        raise ParamsError("root" if root is not None else f"${ENV_ROOT}",
                          f"{str(path)!r} is a file; the runs root is a folder (it is created if missing)")
    return path


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
        raise CorruptRunError(f"{where} must hold a mapping (expected a mapping, got {type(doc).__name__})")
    return doc


def environment() -> dict[str, Any]:
    """The environment record written to metadata.yaml (never part of the run id)."""
    import torch  # here, not at the top: reading runs (`nnx runs list`) needs no torch

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


def env_snapshot(force_refresh: bool = False) -> dict[str, Any]:
    """NNx's environment snapshot: the metadata.yaml record (:func:`environment`) plus numpy's
    version and the working directory's git commit and whether it has changes (None where git
    cannot tell). Read afresh on every call; ``force_refresh`` is accepted for NNx's signature."""
    import subprocess

    import numpy

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=2, check=True).stdout
        except (OSError, subprocess.SubprocessError):
            return None

    commit, status = git("rev-parse", "HEAD"), git("status", "--porcelain")
    return {**environment(), "numpy": numpy.__version__, "git_commit": commit.strip() if commit else None,
            "git_dirty": None if status is None else bool(status.strip())}


def resolve_run_id(run_id: Any, storage: Any, *, where: str = "the runs root") -> str:
    """The full run id ``run_id`` names: itself when such a run exists (or it is a whole id),
    else the one run whose id starts with it. An ``NNRun`` names its id; a hex id is matched
    case-insensitively; a run's folder given as the id is said with the id and root to give
    (``nnx_api.runs.hints``). An ambiguous prefix is ``InvalidRunIdError``, listing the
    candidates; no match is returned as is (the caller reports it missing)."""
    run_id = id_argument(run_id)
    if "/" in run_id or os.sep in run_id:
        folder = enclosing_run(run_id)
        if folder is not None:
            what = f"{run_id!r} is a path, not a run id: {_inside(Path(run_id), folder)}"
            raise located(InvalidRunIdError(f"{what}; {_load_hint(folder)}"), what, folder.name, folder.parent)
    run_id = resolve_case(validate_run_id(run_id), lambda name: storage.exists(f"{name}/run.yaml"))
    if len(run_id) >= ID_HEX_DIGITS or storage.exists(f"{run_id}/run.yaml"):
        return run_id
    matches = [n for n in run_folders(storage) if n.startswith(run_id)]
    if len(matches) > 1:
        shown = ", ".join(m[:12] for m in matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise InvalidRunIdError(f"run id prefix {run_id!r} matches {len(matches)} runs under {where} ({shown}); give more characters")
    return matches[0] if matches else run_id


def _inside(path: Path, folder: Path) -> str:
    """``path`` is (inside) the run folder ``folder``, in words."""
    inside = "" if Path(os.path.abspath(path)) == folder else "inside "
    return f"{path} is {inside}the folder of run {folder.name}"


def _load_hint(folder: Path) -> str:
    return f"name the run by its id and its root: NNRun.load({folder.name!r}, root={str(folder.parent)!r})"


def run_folder(path: Path) -> str | None:
    """When ``path`` is a run's own folder, or lies inside one: how to name that run instead (None:
    it is not in one)."""
    folder = enclosing_run(path)
    return None if folder is None else f"{_inside(path, folder)}; {_load_hint(folder)}"


def run_not_found(run_id: str, base: Path, *, look: bool = True) -> RunNotFoundError:
    """No run ``run_id`` under the runs root ``base`` (a folder): the error says where it is when it
    lies next to ``base`` (``base`` is, or lies inside, a run's folder at any depth; ``base``'s
    parent, a folder beside it or one below it holds it), or that ``base`` does not exist. Never a
    guess: nothing is read but the names. ``look`` False (the runs are in a store of the caller's):
    no looking around. The error carries a ``Where`` (``nnx_api.runs.hints``): the CLI says the
    same as ``--root``."""
    message = f"no run {run_id} under {base}"
    folder = enclosing_run(base) if look else None
    if folder is not None:
        what = f"{message}: {_inside(base, folder)}"
        return located(RunNotFoundError(f"{what}; {_load_hint(folder)}"), what, folder.name, folder.parent)
    for near in _around(base) if look else []:
        if any(p.is_dir() and (p / "run.yaml").is_file() for p in near.glob(f"{run_id}*")):
            what = f"{message}, but {near} holds it"
            return located(RunNotFoundError(f"{what}: pass root={str(near)!r}"), what, run_id, near)
    if look and not base.is_dir():
        what = f"{message}: that folder does not exist"
        return located(RunNotFoundError(f"{what}; pass the root the run was trained with (root=, $NNX_RUNS)"), what, run_id)
    return RunNotFoundError(f"{message}: not found on disk; list runs with `nnx runs list`")


def _around(base: Path) -> list[Path]:
    """The folders one level off ``base``: its parent, the folders below it, the folders beside it
    (at most 100 of each; dot-names left out)."""
    def folders(parent: Path) -> list[Path]:
        try:
            return [p for p in sorted(parent.iterdir()) if p.is_dir() and not p.name.startswith(".")][:100]
        except OSError:
            return []
    beside = [p for p in folders(base.parent) if p != base] if base.parent != base else []
    return [base.parent, *folders(base), *beside]


def run_folders(storage: Any) -> list[str]:
    """The run ids the store's root names, sorted: its run folders, and the runs a replacement not
    yet committed keeps aside (``nnx_core.replacement``); temporaries, leases and other dot-names
    left out."""
    try:
        names = storage.list("")
    except FileNotFoundError:
        return []
    ids = {n for n in names if not n.startswith(".")}
    ids.update(found for n in names if (found := replacement.run_id_of(n)) is not None)
    return sorted(ids)
