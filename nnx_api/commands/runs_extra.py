"""``nnx runs plot | compare | export``: look at, compare and export finished runs.

    nnx runs plot    ID [-o FILE.png] [--force] [--root DIR]  loss/metric/LR curves per epoch, BEST marked
    nnx runs compare ID ID ... [--root DIR]            configuration values that differ, and each
                                                       run's BEST (epoch, monitored value, val scores)
    nnx runs export  ID [--tag best] OUT [--force] [--root DIR]  OUT.safetensors (weights + provenance) or
                                                       OUT.onnx (built-in nets; dynamic batch axis)

``register`` adds them to ``nnx runs``; they share its exit codes. None of them prints a
traceback: a missing optional extra (``plots``, ``export``) is reported with the pip command that
installs it, a file that cannot be written with the reason (exit 1); an output suffix no writer
knows, an output that exists (without ``--force``) or is a folder, or an ONNX opset outside what
the exporter and onnxruntime take, is a usage error (exit 2). ``load_run`` and ``root_problem``
say where a run is when the root is one level off, and the nearest id when an id has a typo.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from nnx_core.errors import NNxError, RunNotFoundError
from nnx_adapters.storage.fs import FileStorage
from nnx_api.runs.curves import committed_records, epoch_scalars, flatten_config, iter_epochs, monitor_name
from nnx_api.runs.hints import enclosing_run
from nnx_api.runs.plots import image_formats
from nnx_api.runs.run import NNRun
from nnx_api.runs.store import run_folders, run_not_found, runs_root
from nnx_api.training.code import SETTINGS


def register(commands: Any, root_help: str) -> None:
    """Add ``plot``, ``compare`` and ``export`` to the ``nnx runs`` sub-command parsers."""
    plot = commands.add_parser("plot", help="plot loss, metrics and LR per epoch (BEST marked) to a PNG")
    plot.add_argument("id")
    plot.add_argument("-o", "--output", help="image file to write (default: <id>.png)")
    plot.add_argument("--root", help=root_help)
    plot.add_argument("--force", action="store_true", help="replace the image file if it exists")
    plot.set_defaults(action=_guard(_plot))
    compare = commands.add_parser("compare", help="configuration differences and BEST values of runs")
    compare.add_argument("ids", nargs="+", metavar="id")
    compare.add_argument("--root", help=root_help)
    compare.set_defaults(action=_guard(_compare))
    export = commands.add_parser("export", help="export a checkpoint as .safetensors or .onnx")
    export.add_argument("id")
    export.add_argument("output", help="file to write: *.safetensors or *.onnx")
    export.add_argument("--tag", default="best", help="checkpoint tag to export (default: best)")
    export.add_argument("--opset", type=int, default=17, help="ONNX opset (default: 17)")
    export.add_argument("--dynamo", action="store_true", help="ONNX: torch.export-based exporter (needs onnxscript)")
    export.add_argument("--root", help=root_help)
    export.add_argument("--force", action="store_true", help="replace OUT if it exists")
    export.set_defaults(action=_guard(_export))


def store(args: argparse.Namespace) -> tuple[Path, FileStorage]:
    """The runs root ``--root`` names (else ``$NNX_RUNS``, else ``./runs``) and its ``Storage``:
    every command reads runs through it (``NNRun.load`` / ``NNRun.all``), never the folders."""
    if args.root is not None and not args.root.strip():
        raise UsageError("--root is empty: give the runs root folder, or leave --root out for $NNX_RUNS, else ./runs")
    root = runs_root(args.root)
    return root, FileStorage(root)


MIN_OPSET = 9  # the oldest opset both torch.onnx writes for NNx's nets and onnxruntime loads
GENERIC = "; list runs with `nnx runs list`"  # run_not_found's ending when it found nothing better to say


class UsageError(Exception):
    """A command-line value no writer accepts (exit 2)."""


def load_run(run_id: str, root: Path, storage: Any) -> NNRun:
    """``NNRun.load`` through the root's storage; a run it does not find is said with where the
    run is (a root one level off, a run's own folder), that the root does not exist, or the
    nearest run id (a typo)."""
    try:
        return NNRun.load(run_id, root, storage=storage)
    except RunNotFoundError as exc:
        if not str(exc).endswith(GENERIC):
            raise
        found = run_not_found(run_id, root)
        message = str(found)
        if not message.endswith(GENERIC):
            raise found from exc  # it says where the run is (its Where: the CLI renders it as --root)
        if (problem := root_problem(root)) is not None:
            message = f"no run {run_id} under {root}: {problem}"
        else:
            ids = run_folders(storage)
            near = difflib.get_close_matches(run_id, [i[: len(run_id)] for i in ids], n=1, cutoff=0.6)
            if near:
                whole = next(i for i in ids if i.startswith(near[0]))
                message = f"no run {run_id} under {root}; did you mean {whole[: max(len(run_id), 8)]}? (`nnx runs list`)"
        raise RunNotFoundError(message) from exc


def root_problem(root: Path) -> str | None:
    """What is wrong with a runs root that holds no run: it is (inside) a run's own folder, or a
    folder inside it holds the runs. None: nothing to say."""
    folder = enclosing_run(root)  # at any depth: <run>/checkpoints/... is inside run <run>
    if folder is not None:
        inside = "" if Path(os.path.abspath(root)) == folder else "inside "
        return (f"--root {root} is {inside}the folder of run {folder.name}; the runs root is the folder "
                f"that holds it: --root {folder.parent}")
    try:
        children = [p for p in sorted(root.iterdir())[:100] if p.is_dir()] if root.is_dir() else []
        for child in children:
            if any((q / "run.yaml").is_file() for q in sorted(child.iterdir())[:100] if q.is_dir()):
                return f"{child} holds runs: pass --root {child}"
    except OSError:
        return None
    return None


EXPORT_NAMES = ("model.safetensors", "model.onnx")  # what a folder given as `export`'s OUT is told to hold


def check_output(target: Path, force: bool, names: tuple[str, ...] = EXPORT_NAMES) -> None:
    """Refuse, before anything is written, an output that is a folder (the files to name in it,
    each with a suffix its writer takes: ``names``), lies under a file, or exists (unless ``--force``)."""
    if target.is_dir():
        files = " or ".join(str(target / name) for name in names)
        raise UsageError(f"{target} is a folder: name the file to write in it, e.g. {files}")
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OSError(errno.ENOTDIR, f"{parent} is a file, not a folder", str(target))
            break
    if target.exists() and not force:
        raise UsageError(f"{target} exists; pass --force to replace it, or name another file")


def _guard(action: Callable[[argparse.Namespace, TextIO], int]) -> Callable[[argparse.Namespace, TextIO], int]:
    def run(args: argparse.Namespace, out: TextIO) -> int:
        try:
            return action(args, out)
        except NNxError:
            raise  # the CLI's own handling (exit codes by type)
        except UsageError as exc:
            print(f"nnx: {exc}", file=sys.stderr)
            return 2
        except ImportError as exc:  # an optional extra is missing: say which
            print(f"nnx: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            target = exc.filename or getattr(args, "output", None) or "the output"
            print(f"nnx: cannot write {target}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        except Exception as exc:  # never a traceback: what failed, in one line
            print(f"nnx: {args.command} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                  file=sys.stderr)
            return 1

    return run


def _plot(args: argparse.Namespace, out: TextIO) -> int:
    root, storage = store(args)
    run = load_run(args.id, root, storage)
    if not run.idps:
        print(f"nnx: run {run.id} has no committed epoch to plot", file=sys.stderr)
        return 1
    output = args.output or f"{run.id}.png"
    check_output(Path(output), args.force, (f"{run.id[:8]}.png",))
    _check_image_suffix(output)
    target = run.plot(output)
    print(f"wrote {target}", file=out)
    return 0


def _check_image_suffix(output: str) -> None:
    """Refuse an output name matplotlib cannot write, before anything is drawn."""
    formats = image_formats()
    suffix = Path(output).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise UsageError(
            f"cannot tell the image format of {Path(output).name!r}: name it *.png (or one of "
            f"{', '.join('.' + f for f in sorted(formats))})"
        )


def _compare(args: argparse.Namespace, out: TextIO) -> int:
    root, storage = store(args)
    runs = [load_run(run_id, root, storage) for run_id in args.ids]
    print(render_comparison(runs), file=out)
    return 0


def render_comparison(runs: list[NNRun]) -> str:
    """The ``compare`` table: one column per run."""
    header = ["", *(run.id[:12] for run in runs)]
    rows: list[list[str]] = []
    configs = [flatten_config(run.config) for run in runs]
    keys = sorted(set().union(*configs))
    differing = [k for k in keys if len({repr(c.get(k)) for c in configs}) > 1]
    rows.append(["config (values that differ)", *[""] * len(runs)])
    if not differing:
        rows.append(["  (none)", *[""] * len(runs)])
    for key in differing:
        rows.append([f"  {key}", *(_cell(c.get(key, "-")) for c in configs)])
    codes = [run.code_fingerprint or {} for run in runs]
    changed = [r for r in sorted(set().union(*codes) - {SETTINGS}) if len({repr(c.get(r)) for c in codes}) > 1]
    if changed:
        rows.append(["code (user code that differs)", *[""] * len(runs)])
        for role in changed:
            rows.append([f"  {role}", *(_code_cell(c.get(role)) for c in codes)])
    rows.append(["best", *[""] * len(runs)])
    picks = [_best_values(run) for run in runs]
    names = ["epoch", "monitor", "value"]
    names += sorted({k for p in picks for k in p if k.startswith("val/") and "/extra/" not in k} - set(names))
    names += ["epochs committed"]
    for name in names:
        rows.append([f"  {name}", *(_cell(p.get(name, "-")) for p in picks)])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    return "\n".join(lines)


def _best_values(run: NNRun) -> dict[str, Any]:
    best = run.best()
    committed, scalars = 0, None
    for epoch, records in iter_epochs(committed_records(run)):
        committed += 1
        if best is not None and epoch == best.epoch_idx:
            scalars = epoch_scalars(records)
    out: dict[str, Any] = {"epochs committed": committed}
    if best is None or scalars is None:
        return out
    out.update({k: v for k, v in scalars.items() if k.startswith("val/")})
    out["epoch"] = best.epoch_idx
    out["monitor"] = monitor_name(best) or "-"
    if best.selection is not None and best.selection.value is not None:
        out["value"] = best.selection.value
    return out


def _code_cell(entry: Any) -> str:
    """One run's piece of user code in words: its name and source digest, or why there is none."""
    if entry is None:
        return "- (not used)"
    digest = entry.get("sha256")
    return f"{entry.get('name')} ({'source ' + digest[:8] if digest else 'source unreadable'})"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_cell(v) for v in value) + "]"
    return str(value)


def _export(args: argparse.Namespace, out: TextIO) -> int:
    from nnx_api.model import NNModel  # torch: imported by the command that needs it, not by `nnx --help`
    from nnx_api.runs.export import default_example_input, export_safetensors

    root, storage = store(args)
    target = Path(args.output)
    suffix = target.suffix.lower()
    if Path(args.id).suffix.lower() in (".safetensors", ".onnx") and suffix not in (".safetensors", ".onnx"):
        raise UsageError(f"{args.id!r} looks like the file to write and {args.output!r} like the run: the run id comes "
                         f"first: nnx runs export {args.output} {args.id}")
    if suffix in (".safetensors", ".onnx") or target.is_dir():
        check_output(target, args.force)
    if suffix == ".onnx":
        _check_opset(args.opset, args.dynamo)
    run = load_run(args.id, root, storage)
    if suffix == ".safetensors":
        export_safetensors(run, target, tag=args.tag)
    elif suffix == ".onnx":
        model = NNModel.from_checkpoint(run.id, args.tag, root=root, storage=storage)
        model.to_onnx(target, default_example_input(run), opset=args.opset, dynamo=args.dynamo)
    else:
        print(f"nnx: cannot tell the format of {target.name!r}: name it *.safetensors or *.onnx", file=sys.stderr)
        return 2
    checkpoint = run.checkpoint(args.tag)
    epoch = "" if checkpoint is None else f" (epoch {checkpoint.epoch})"
    print(f"wrote {target} from run {run.id} tag {args.tag!r}{epoch}", file=out)
    return 0


def _check_opset(opset: int, dynamo: bool) -> None:
    """Refuse an opset the chosen exporter does not write, before anything is loaded or written."""
    from torch.onnx import _constants  # torch's own bounds: 20 for the TorchScript exporter, 23 for dynamo

    newest = getattr(_constants, "ONNX_MAX_OPSET" if dynamo else "ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET", 20)
    if opset < MIN_OPSET:
        raise UsageError(f"--opset {opset} is older than onnxruntime and the exporter support; use --opset {MIN_OPSET} "
                         "or newer (default 17)")
    if opset > newest:
        other = "" if dynamo else f", or --dynamo (up to {getattr(_constants, 'ONNX_MAX_OPSET', newest)})"
        raise UsageError(f"--opset {opset} is newer than the {'dynamo' if dynamo else 'TorchScript'} exporter writes "
                         f"(at most {newest}); use --opset {newest} or older{other}")


__all__ = ["check_output", "load_run", "register", "render_comparison", "root_problem", "store"]
