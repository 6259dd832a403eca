"""``nnx``: look at runs from the shell, and prove they are intact.

    nnx runs list   [--root DIR]       every run: id, committed epochs, tags, best, attempt status
    nnx runs show   ID [--root DIR]    configuration, committed epochs, tags and BEST of one run
    nnx runs verify ID [--root DIR]    re-hash every blob of every tag, decode it with the safe
                                       loader, and check the history against LAST

The runs root is ``--root``, else ``$NNX_RUNS``, else ``./runs``. Exit codes: 0 fine; 1 problems
found (``verify``), or the run is missing or unreadable; 2 usage errors, including a run id that
is not allowed (``../x``, ``a/b``: ids never leave the runs root).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from nnx_core.commit import LAST, RunFiles
from nnx_core.errors import CorruptRunError, InvalidRunIdError, NNxError, RunNotFoundError
from nnx_core.history import coverage_problems, parse_history
from nnx_core.identity import validate_run_id
from nnx_adapters.pytorch import state as torch_state
from nnx_adapters.storage.paths import TMP_PREFIX
from nnx_api.cli_extra import register
from nnx_api.runs.journal import check_journal, epoch_summaries, has_journal
from nnx_api.runs.run import NNRun, dump_yaml, runs_root


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the CLI; return its exit code (the console script exits with it)."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = _parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse already printed the usage error
        return int(exc.code or 0)
    if getattr(args, "action", None) is None:
        print(parser.format_usage().rstrip() + "\n  commands: nnx runs list | show ID | verify ID  [--root DIR]", file=err)
        return 2
    try:
        return args.action(args, out)
    except InvalidRunIdError as exc:
        print(f"nnx: {exc}", file=err)
        return 2
    except RunNotFoundError as exc:
        print(f"nnx: {exc}", file=err)
        return 1
    except CorruptRunError as exc:
        print(f"nnx: run is unreadable: {exc}", file=err)
        return 1
    except NNxError as exc:
        print(f"nnx: {exc}", file=err)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nnx", description="Inspect and verify NNx runs.")
    groups = parser.add_subparsers(dest="group")
    runs = groups.add_parser("runs", help="list, show and verify runs")
    commands = runs.add_subparsers(dest="command")
    root_help = "the runs root (default: $NNX_RUNS, else ./runs)"
    listing = commands.add_parser("list", help="every run under the root")
    listing.add_argument("--root", help=root_help)
    listing.set_defaults(action=_list)
    show = commands.add_parser("show", help="configuration, epochs, tags and BEST of one run")
    show.add_argument("id")
    show.add_argument("--root", help=root_help)
    show.set_defaults(action=_show)
    verify = commands.add_parser("verify", help="re-hash every blob and check history against LAST")
    verify.add_argument("id")
    verify.add_argument("--root", help=root_help)
    verify.set_defaults(action=_verify)
    register(commands, root_help)  # plot / compare / export
    return parser


# -- list -----------------------------------------------------------------------------------------


def _list(args: argparse.Namespace, out: TextIO) -> int:
    root = runs_root(args.root)
    entries = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []
    if not entries:
        print(f"no runs under {root}", file=out)
        return 0
    rows = [("ID", "EPOCHS", "BEST", "STATUS", "TAGS")]
    for name in entries:
        try:
            run = NNRun.load(name, root)
        except (NNxError, ValueError) as exc:
            rows.append((name, "-", "-", "unreadable", str(exc).splitlines()[0][:60]))
            continue
        files = run.files()
        last = files.read_tag(LAST)
        best = files.read_tag("best")
        rows.append(
            (
                run.id,
                "0" if last is None else str(last.epoch + 1),
                "-" if best is None else str(best.epoch),
                _attempt(files).get("status", "-"),
                ",".join(files.tags()) or "-",
            )
        )
    _table(rows, out)
    return 0


# -- show -----------------------------------------------------------------------------------------


def _show(args: argparse.Namespace, out: TextIO) -> int:
    run = NNRun.load(args.id, runs_root(args.root))
    files = run.files()
    last = files.read_tag(LAST)
    print(f"run {run.id}", file=out)
    print(f"path: {run.path}", file=out)
    attempt = _attempt(files)
    if attempt:
        print(f"attempt: {attempt.get('status')} (last committed epoch {attempt.get('last_committed_epoch')})", file=out)
    if run.resume_status:
        print(f"resumed from: {dict(run.resume_status)}", file=out)
    print("config:", file=out)
    for line in dump_yaml(run.config).decode("utf-8").splitlines():
        print(f"  {line}", file=out)
    print("tags:", file=out)
    if last is None:
        print("  (nothing committed)", file=out)
    for tag in files.tags():
        manifest = files.read_tag(tag)
        if manifest is not None:
            ref = manifest.blobs.get("state")
            blob = f"{ref.sha256[:16]}  {ref.size} bytes" if ref else ""
            print(f"  {tag:<8} epoch {manifest.epoch:<4} {blob}", file=out)
    best = run.best()
    if best is not None:
        sel = best.selection
        detail = ""
        if sel is not None:
            name = sel.metric if sel.split == sel.metric else f"{sel.split} {sel.metric}"
            detail = f"  (monitor {name} = {sel.value})"
        print(f"best: epoch {best.epoch_idx}{detail}", file=out)
    else:
        print("best: -", file=out)
    print("epochs:", file=out)
    rows = [("EPOCH", "TRAIN_LOSS", "VAL_LOSS", "VAL_ACC", "MONITOR", "IMPROVED")]
    journal_rows = epoch_summaries(files.storage, run.id, last)  # a journal's epochs.jsonl; None: eager
    rows.extend(
        (str(r["epoch"]), _num(r["train_loss"]), _num(r["val_loss"]), _num(r.get("val_acc")), _num(r["monitor"]),
         "-" if r["improved"] is None else ("yes" if r["improved"] else "no"))
        for r in journal_rows or ()
    )
    for epoch, idp in sorted(run.epochs.items()) if journal_rows is None else ():
        batch = [r for r in run.idps if r.epoch_idx == epoch]
        weighted = [(r.train_edp.loss, r.train_edp.count or 1) for r in batch if r.train_edp.loss is not None]
        train_loss = sum(v * c for v, c in weighted) / sum(c for _, c in weighted) if weighted else None
        val = idp.val_edp
        sel = idp.selection
        rows.append(
            (
                str(epoch),
                _num(train_loss),
                _num(val.loss if val else None),
                _num(val.accuracy if val else None),
                _num(sel.value if sel else None),
                "-" if sel is None else ("yes" if sel.improved else "no"),
            )
        )
    _table(rows, out, indent="  ")
    return 0


# -- verify ---------------------------------------------------------------------------------------


def _verify(args: argparse.Namespace, out: TextIO) -> int:
    """Check one run the way a resume would, and more; print each finding; 1 if any problem."""
    run_id = validate_run_id(args.id)
    root = runs_root(args.root)
    problems: list[str] = []
    notes: list[str] = []
    try:
        run = NNRun.load(run_id, root)
    except CorruptRunError as exc:
        print(f"PROBLEM: {exc}", file=out)
        print(f"run {run_id}: 1 problem", file=out)
        return 1
    files = run.files()
    last = files.read_tag(LAST)
    checked_blobs: set[str] = set()
    for tag in files.tags():
        try:
            manifest = files.read_tag(tag)
        except CorruptRunError as exc:
            problems.append(str(exc))
            continue
        if manifest is None:
            continue
        if last is None or manifest.epoch > last.epoch:
            problems.append(f"tag {tag!r} names epoch {manifest.epoch}, after LAST ({None if last is None else last.epoch})")
        for name, ref in sorted(manifest.blobs.items()):
            try:
                data = files.read_blob(ref, verify=True)
                payload = torch_state.decode(data, where=f"tag {tag!r} blob {name!r}")
            except CorruptRunError as exc:
                problems.append(f"tag {tag!r}: {exc}")
                continue
            if "epoch" in payload and int(payload["epoch"]) != manifest.epoch:
                problems.append(f"tag {tag!r} names epoch {manifest.epoch} but its blob holds epoch {payload['epoch']}")
            if ref.sha256 not in checked_blobs:
                checked_blobs.add(ref.sha256)
                print(f"ok    blob {ref.sha256[:16]} ({ref.size} bytes, {tag})", file=out)
    _check_history(files, last, problems, notes)
    stale = _temporaries(files, run_id)
    if stale:
        notes.append(f"{len(stale)} stale temporary file(s) from an interrupted write (ignored; the next writer removes them)")
    if last is None:
        notes.append("nothing committed yet (no LAST)")
    for note in notes:
        print(f"note: {note}", file=out)
    for problem in problems:
        print(f"PROBLEM: {problem}", file=out)
    summary = "OK" if not problems else f"{len(problems)} problem(s)"
    committed = "nothing committed" if last is None else f"LAST epoch {last.epoch}"
    print(f"run {run_id}: {summary} ({committed}, {len(checked_blobs)} blob(s) verified)", file=out)
    return 1 if problems else 0


def _check_history(files: RunFiles, last: Any, problems: list[str], notes: list[str]) -> None:
    if has_journal(files.storage, files.run_id):
        return check_journal(files.storage, files.run_id, last, problems, notes)
    try:
        raw = parse_history(files.storage.read(files.history))
    except FileNotFoundError:
        raw = []
    except CorruptRunError as exc:
        problems.append(str(exc))
        return
    if last is None:
        if raw:
            notes.append(f"{len(raw)} history row(s) without a committed LAST (ignored by readers)")
        return
    tail = [r for r in raw if r.epoch_idx > last.epoch]
    committed = (r.epoch_idx for r in raw if r.epoch_idx <= last.epoch)
    problems.extend(coverage_problems(committed, last.epoch, "the history", "rows"))
    if tail:
        notes.append(f"{len(tail)} history row(s) newer than LAST (an interrupted commit; readers ignore them)")


def _temporaries(files: RunFiles, folder: str) -> list[str]:
    import os

    base = os.path.join(files.storage.root, folder)  # type: ignore[attr-defined]
    return [n for _, _, names in os.walk(base) for n in names if n.startswith(TMP_PREFIX)]


# -- helpers --------------------------------------------------------------------------------------


def _attempt(files: RunFiles) -> dict[str, Any]:
    try:
        doc = json.loads(files.storage.read(files.attempt))
    except (FileNotFoundError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _table(rows: list[tuple[str, ...]], out: TextIO, indent: str = "") -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)


if __name__ == "__main__":
    sys.exit(main())
