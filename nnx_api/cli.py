"""``nnx``: look at runs from the shell, and prove they are intact.

    nnx runs list    [--sort KEY] [--status S] [--where K=V] [--full]
                                  every run: id, started, duration, epochs, BEST, monitor, status
    nnx runs show    ID           configuration, committed epochs, tags, BEST and data of one run
    nnx runs verify  ID [--repair]  re-hash every blob of every tag, decode it with the safe loader,
                                  and check the history against LAST and its own continuity;
                                  --repair settles a replacement whose attempt is gone
    nnx runs plot | compare | export   (``nnx_api.commands.runs_extra``)
    nnx --version

``ID`` is a whole run id or a unique prefix of one (``list`` shows 8 characters). Every command
takes ``--root DIR``: the runs root is ``--root``, else ``$NNX_RUNS``, else ``./runs``. Runs are
read through ``NNRun.load`` / ``NNRun.all`` over the root's ``Storage`` (``FileStorage(root)``), never by
walking its folders. Exit codes: 0 fine; 1 problems found
(``verify``), or the run is missing or unreadable; 2 usage errors, including a run id that is not
allowed (``../x``, ``a/b``: ids never leave the runs root) or a prefix that names several runs,
and an option nnx does not take (other tools' names, such as ``--logdir``, are answered with
nnx's: ``--root``). Each usage error is two lines: what was given and wanted, and what to do.
An error that says where a run is (its ``Where``: ``nnx_api.runs.hints``) is printed as the
command to type, ``nnx runs <command> ID --root DIR``, never as the readers' Python (``root=``).
A run whose attempt record says "running" while nobody holds its lease is shown ``interrupted``
(killed, or stopped with Ctrl-C): ``resume="auto"`` continues it.

Start-up: ``--help``, ``list``, ``show`` and ``compare`` never import torch (``import nnx_api`` binds
its names lazily, and the run readers import torch only to decode a blob or build a run's params);
``verify`` decodes blobs and ``export`` builds the model, so they import it when they run
(``tests/api/test_cli_startup.py``; docs/performance.md, "CLI start-up").
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from nnx_core import replacement
from nnx_core.admission import COMPLETED, FAILED, INTERRUPTED, RUNNING, STOPPED, attempt_now
from nnx_core.commit import LAST, RunFiles, committed_coverage, history_tail, read_history
from nnx_core.eager_history import continuity_problems, parse_history
from nnx_core.errors import CorruptRunError, InvalidRunIdError, NNxError, RunNotFoundError, StaleCheckpointError
from nnx_core.identity import ID_HEX_DIGITS
from nnx_api.commands.runs_extra import UsageError, load_run, register, root_problem, store
from nnx_api.config.base import TORCH_NAMES
from nnx_api.runs.curves import flatten_config, monitor_name
from nnx_api.runs.hints import cli_text
from nnx_api.runs.journal import check_journal, epoch_summaries, has_journal
from nnx_api.runs.partial import committed_text, epochs_done, partial_of, position_problems, resume_text
from nnx_api.runs.payload import decode_payload
from nnx_api.runs.run import NNRun
from nnx_api.runs.store import dump_yaml, resolve_run_id

COMMANDS = ("list", "show ID", "verify ID", "plot ID", "compare ID ID...", "export ID OUT")
COMMAND_NAMES = tuple(c.split()[0] for c in COMMANDS)
SORT_KEYS = ("started", "duration", "epochs", "monitor", "status", "id")
STATUSES = (RUNNING, COMPLETED, STOPPED, FAILED, INTERRUPTED, "unreadable")
ROOT = "--root (the runs root)"
OTHER_NAMES = {  # other tools' names of nnx's options: answered with nnx's, never "unrecognized"
    **dict.fromkeys(("--logdir", "--log-dir", "--log_dir", "--run-dir", "--run_dir", "--runs-dir", "--runs_dir",
                     "--runs", "--dir", "--root-dir", "--root_dir", "--save-dir", "--save_dir", "--output-dir",
                     "--output_dir", "--experiment-dir", "--checkpoint-dir", "--path"), ROOT),
    **dict.fromkeys(("--checkpoint", "--ckpt", "--checkpoint-tag", "--epoch"), "--tag (a checkpoint tag: best, last...)"),
    **dict.fromkeys(("--run", "--run-id", "--run_id", "--id"), "ID, the first argument (a run id or a unique prefix)"),
    **dict.fromkeys(("--opset-version", "--opset_version"), "--opset"),
    **dict.fromkeys(("--sort-by", "--sort_by", "--order-by"), "--sort"),
    **dict.fromkeys(("--filter", "--query"), "--where KEY=VALUE"),
    **dict.fromkeys(("--fix", "--recover"), "--repair (verify)"),
    **dict.fromkeys(("--overwrite", "--yes", "-f"), "--force (plot, export)"),
    **dict.fromkeys(("--format", "--type"), "OUT's suffix (.safetensors or .onnx; .png for plot)"),
}


class _Parser(argparse.ArgumentParser):
    """argparse with two-line errors: what was wrong, and where the options are described."""

    def error(self, message: str) -> Any:  # noqa: D102 - argparse's hook
        hint = f"`{self.prog} --help` describes its arguments"
        choice = re.search(r"invalid choice: '([^']*)'", message)
        if self.prog == "nnx" and choice and choice.group(1) in COMMAND_NAMES:  # `nnx list`: the group left out
            hint = f"did you mean `nnx runs {choice.group(1)}`? {hint}"
        if choice and "--sort" in message and (ours := TORCH_NAMES.get(choice.group(1))) is not None:
            hint = (f"--sort orders rows by a column, not a configuration value (PyTorch's {choice.group(1)!r} is {ours} "
                    f"here): pick runs with --where {ours}=VALUE; {hint}")
        self.exit(2, f"{self.prog}: error: {message}\n{hint}\n")


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the CLI; return its exit code (the console script exits with it)."""
    out = out or sys.stdout
    err = err or sys.stderr
    parser = _parser()
    try:
        args, extras = parser.parse_known_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse already printed the usage error
        return int(exc.code or 0)
    if extras:
        print(_unknown(parser, args, extras), file=err)
        return 2
    if getattr(args, "action", None) is None:
        commands = "\n".join(f"  nnx runs {c}" for c in COMMANDS)
        print(f"{parser.format_usage().rstrip()}\ncommands (each takes --root DIR; ID: a run id or a unique prefix):\n"
              f"{commands}\n  nnx --version\nnnx runs COMMAND --help describes one", file=err)
        return 2
    args.err = err
    try:
        with warnings.catch_warnings():  # what a load warns of, `verify` reports as a problem
            warnings.filterwarnings("ignore", message=r"run \w+: its history \(idps.csv\) is missing")
            return args.action(args, out)
    except BrokenPipeError:  # `nnx runs show ID | head`: the reader left; stop quietly, as cat does
        _silence_stdout()
        return 141  # 128 + SIGPIPE, what a shell reports for a command its pipe closed
    except (InvalidRunIdError, UsageError) as exc:
        print(f"nnx: {_said(exc, args)}", file=err)
        return 2
    except RunNotFoundError as exc:
        print(f"nnx: {_said(exc, args)}", file=err)
        return 1
    except CorruptRunError as exc:
        print(f"nnx: run is unreadable: {exc}", file=err)
        return 1
    except NNxError as exc:
        print(f"nnx: {_said(exc, args)}", file=err)
        return 1


def _said(exc: Exception, args: argparse.Namespace) -> str:
    """An error in the command line's words: where it says where a run is (its ``Where``), the
    command to type with ``--root``, never Python's ``root=`` (``nnx_api.runs.hints.cli_text``)."""
    ids = list(getattr(args, "ids", None) or ([args.id] if getattr(args, "id", None) else []))
    output = getattr(args, "output", None) if args.command == "export" else None
    return cli_text(exc, args.command, ids, output)


def _unknown(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: list[str]) -> str:
    """The two lines an argument no command takes gets: nnx's name for another tool's option, the
    nearest option of the command, or the argument that is one too many."""
    command = getattr(args, "command", None)
    sub = parser._nnx_commands.get(command) if command else None  # type: ignore[attr-defined]
    prog = sub.prog if sub is not None else "nnx"
    options = [o for o in extras if o.startswith("-")]
    if not options:
        hint = ""
        if sub is not None and "--root" in sub._option_string_actions and os.path.isdir(extras[0]):
            hint = f"did you mean --root {extras[0]}? (the runs root is an option) "  # `nnx runs list runs/`
        return f"{prog}: error: unexpected argument {extras[0]!r}\n{hint}`{prog} --help` describes its arguments"
    given = options[0].split("=", 1)[0]
    ours = OTHER_NAMES.get(given)
    if command == "export" and given in ("-o", "--output", "--out"):
        ours = "OUT, the second argument: nnx runs export ID OUT"
    if ours is not None:
        return f"{prog}: error: {given} is not an nnx option; nnx's is {ours}\n`{prog} --help` describes its arguments"
    known = [o for action in (sub or parser)._actions for o in action.option_strings]
    near = difflib.get_close_matches(given, known, n=1)
    hint = f"did you mean {near[0]}? " if near else ""
    return f"{prog}: error: {given} is not an option of {prog}\n{hint}`{prog} --help` describes its arguments"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="nnx", description="Inspect and verify NNx runs.")
    parser.add_argument("--version", action="version", version=f"nnx {_version()}")
    groups = parser.add_subparsers(dest="group")
    runs = groups.add_parser("runs", help="list, show, verify, plot, compare and export runs")
    commands = runs.add_subparsers(dest="command")
    root_help = "the runs root (default: $NNX_RUNS, else ./runs)"
    listing = commands.add_parser("list", help="every run under the root")
    listing.add_argument("--root", help=root_help)
    listing.add_argument("--sort", choices=SORT_KEYS, default="started", help="order of the rows (default: started; monitor: each run's best value first, by its monitor's mode)")
    listing.add_argument("--reverse", action="store_true", help="reverse the order")
    listing.add_argument("--status", action="append", help="only runs with this status (repeatable)")
    listing.add_argument("--where", action="append", metavar="KEY=VALUE",
                         help="only runs whose configuration has KEY=VALUE, e.g. train.n_epochs=10 (repeatable)")
    listing.add_argument("--full", action="store_true", help="whole run ids")
    listing.set_defaults(action=_list)
    show = commands.add_parser("show", help="configuration, epochs, tags and BEST of one run")
    show.add_argument("id")
    show.add_argument("--root", help=root_help)
    show.set_defaults(action=_show)
    verify = commands.add_parser("verify", help="re-hash every blob and check history against LAST")
    verify.add_argument("id")
    verify.add_argument("--root", help=root_help)
    verify.add_argument("--repair", action="store_true", help="settle a replacement (overwrite_existing=True) whose "
                        "attempt is gone: keep the new run if it committed an epoch, else restore the previous run")
    verify.set_defaults(action=_verify)
    register(commands, root_help)  # plot / compare / export
    parser._nnx_commands = dict(commands.choices)  # type: ignore[attr-defined]
    return parser


# -- list -----------------------------------------------------------------------------------------


def _list(args: argparse.Namespace, out: TextIO) -> int:
    root, storage = store(args)
    where = [_condition(w) for w in args.where or ()]
    rows: list[dict[str, Any]] = []

    def unreadable(name: str, exc: Exception) -> None:
        rows.append({"id": name, "status": "unreadable", "note": str(exc).splitlines()[0][:60]})

    wanted = {s.strip().lower() for group in args.status or () for s in group.split(",")}
    for status in sorted(wanted - set(STATUSES)):
        near = difflib.get_close_matches(status, STATUSES, n=1)
        raise UsageError(f"--status {status}: no run has this status" + (f"; did you mean {near[0]}?" if near else "")
                         + f" (statuses: {', '.join(STATUSES)})")
    runs = NNRun.all(root, storage=storage, on_unreadable=unreadable)
    if not runs and not rows and (problem := root_problem(root)) is not None:
        raise RunNotFoundError(f"no runs under {root}: {problem}")
    if not root.exists():
        print(f"nnx: note: {root} does not exist; pass the root the runs were trained in (--root DIR or $NNX_RUNS)",
              file=getattr(args, "err", None) or sys.stderr)
    _check_keys(runs, [key for key, _ in where])
    rows.extend(_summary(run) for run in runs if all(_matches(run, key, value) for key, value in where))
    found = len(rows)
    rows = [r for r in rows if not wanted or r["status"] in wanted]
    if not rows:
        print(f"no runs under {root}" + (" match" if found or runs else ""), file=out)
        return 0
    rows.sort(key=lambda r: _order(r, args.sort), reverse=args.reverse)
    width = ID_HEX_DIGITS if args.full else _prefix_width([r["id"] for r in rows])
    table = [("ID", "STARTED", "DURATION", "EPOCHS", "BEST", "MONITOR", "STATUS")]
    for r in rows:
        monitor = "-" if r.get("monitor") is None else f"{r['monitor']} {r['value']:.4g}"
        table.append((
            r["id"][:width], r.get("started", "-"), _duration(r.get("seconds")), str(r.get("epochs", "-")),
            str(r.get("best", "-")), monitor, r["status"] + (f" ({r['note']})" if r.get("note") else ""),
        ))
    _table(table, out)
    return 0


def _summary(run: NNRun) -> dict[str, Any]:
    """One ``list`` row of a readable run."""
    files = run.files()
    last = files.read_tag(LAST)
    record = attempt_now(files) or {}
    best = run.best()
    row: dict[str, Any] = {
        "id": run.id, "epochs": epochs_done(last), "status": record.get("status") or "-",
        "best": "-" if best is None else best.epoch_idx,
    }
    started, finished = _time(record.get("started_at")), _time(record.get("finished_at"))
    if started is not None:
        row["started"] = started.astimezone().strftime("%Y-%m-%d %H:%M")
        row["start"] = started.timestamp()
        end = finished or (datetime.now(UTC) if row["status"] == RUNNING else None)
        row["seconds"] = None if end is None else (end - started).total_seconds()
    if best is not None and best.selection is not None and best.selection.value is not None:
        row["monitor"], row["value"] = monitor_name(best), best.selection.value
        row["rank"] = -best.selection.value if best.selection.mode == "max" else best.selection.value  # best first
    notes = [note for note in (partial_of(last), replacement.describe(files.storage, run.id)) if note is not None]
    if notes:
        row["note"] = "; ".join(notes)
    return row


def _order(row: dict[str, Any], key: str) -> tuple[Any, ...]:
    value = {"started": row.get("start"), "duration": row.get("seconds"), "epochs": row.get("epochs"),
             "monitor": row.get("rank"), "status": row.get("status"), "id": row["id"]}[key]
    return (value is None, value if value is not None else 0, row["id"])


def _condition(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InvalidRunIdError(f"--where takes KEY=VALUE (e.g. train.n_epochs=10), got {text!r}")
    return key.strip(), value.strip()


def _matches(run: NNRun, key: str, value: str) -> bool:
    config = flatten_config(run.config)
    found = [v for k, v in config.items() if k == key or k.endswith("." + key)]
    wanted = _number(value)
    return any(str(v) == value or repr(v) == value or (wanted is not None and _number(v) == wanted) for v in found)


def _number(value: Any) -> float | None:
    """A configuration value or a ``--where`` value as a number (``1e-2`` and ``0.01`` are one
    value); None for text, booleans and None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _check_keys(runs: Sequence[NNRun], keys: Sequence[str]) -> None:
    """A ``--where`` key no run's configuration has is a typo, not "no runs match": say so, with
    the nearest keys."""
    known = {k for run in runs for k in flatten_config(run.config)}
    for key in keys:
        if runs and not any(k == key or k.endswith("." + key) for k in known):
            ours = TORCH_NAMES.get(key.rsplit(".", 1)[-1])  # PyTorch's name of a field: lr is max_lr here
            near = difflib.get_close_matches(key, sorted(known | {k.rsplit(".", 1)[-1] for k in known}), n=3)
            hint = (f"; PyTorch's {key.rsplit('.', 1)[-1]!r} is {ours} here: --where {ours}=..." if ours else
                    f"; did you mean {', '.join(near)}?" if near else " (`nnx runs show ID` lists a run's keys)")
            raise InvalidRunIdError(f"--where {key}: no run has this configuration key{hint}")


def _prefix_width(ids: list[str], minimum: int = 8) -> int:
    """The shortest prefix length (≥ ``minimum``) that tells every id apart."""
    width = minimum
    while width < ID_HEX_DIGITS and len({i[:width] for i in ids}) < len(set(ids)):
        width += 1
    return width


def _time(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text)) if text else None
    except ValueError:
        return None


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes}m{seconds:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nnx")
    except PackageNotFoundError:  # a source tree that was never installed
        return "(not installed)"


# -- show -----------------------------------------------------------------------------------------


def _show(args: argparse.Namespace, out: TextIO) -> int:
    root, storage = store(args)
    run = load_run(args.id, root, storage)
    files = run.files()
    last = files.read_tag(LAST)
    print(f"run {run.id}", file=out)
    print(f"path: {run.path}", file=out)
    attempt = attempt_now(files)
    if attempt:
        print(f"attempt: {attempt['status']} since {attempt.get('started_at')} ({committed_text(last)})", file=out)
    if (partial := partial_of(last)) is not None:
        print(partial, file=out)
    replaced = replacement.describe(files.storage, run.id, detail=True)
    if replaced is not None:
        print(f"replacement: {replaced}", file=out)
    if run.resume_status:
        print(f"resumed from: {dict(run.resume_status)}", file=out)
    for loader, fp in sorted((run.data_fingerprint or {}).items()):
        print(f"data: {loader} rows {fp.get('rows')} batches {fp.get('batches')} sample {fp.get('sample')} "
              f"(first batch {fp.get('batch')})", file=out)
    if run.trained:
        print(f"trained: net {run.trained.get('net')}; {run.trained.get('update')}; loss {run.trained.get('loss')}", file=out)
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
    journal_rows = epoch_summaries(files.storage, run.id, last, files.root)  # a journal's epochs.jsonl; None: eager
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
    root, storage = store(args)
    problems: list[str] = []
    notes: list[str] = []
    run_id = args.id
    if args.repair:
        _repair(run_id, root, storage, out)
    try:
        run = load_run(run_id, root, storage)
    except CorruptRunError as exc:
        print(f"PROBLEM: {exc}", file=out)
        print(f"run {run_id}: 1 problem", file=out)
        return 1
    files, run_id = run.files(), run.id
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
        written = files.read_written(tag) if tag != LAST else manifest
        if written is None or written.epoch < manifest.epoch:  # LAST lists it: readers take LAST's
            notes.append(f"checkpoints/{tag}.json {'is missing' if written is None else 'lags behind LAST'}; LAST lists "
                         f"it (a commit stopped after LAST), so it reads as LAST (epoch {manifest.epoch}) until the next "
                         "train() of this run writes it again")
        if last is None or manifest.epoch > last.epoch:
            problems.append(f"tag {tag!r} names epoch {manifest.epoch}, after LAST ({None if last is None else last.epoch})")
        for name, ref in sorted(manifest.blobs.items()):
            try:
                data = files.read_blob(ref, verify=True)
                payload = decode_payload(data, f"tag {tag!r} blob {name!r}")
            except CorruptRunError as exc:
                problems.append(f"tag {tag!r}: {exc}")
                continue
            except StaleCheckpointError:
                notes.append(f"tag {tag!r} moved on while it was checked (a commit landed: the run is training); "
                             "verify again to check the new one")
                continue
            if int(payload.epoch) != manifest.epoch:
                problems.append(f"tag {tag!r} names epoch {manifest.epoch} but its blob holds epoch {payload.epoch}")
            problems.extend(position_problems(tag, manifest, payload))
            if ref.sha256 not in checked_blobs:
                checked_blobs.add(ref.sha256)
                print(f"ok    blob {ref.sha256[:16]} ({ref.size} bytes, {tag})", file=out)
    _check_history(files, last, problems, notes)
    lost = run.lost_best()
    if lost is not None:
        problems.append(
            f"checkpoints/best.json is missing, though the history names epoch {lost} as the best: BEST's weights are "
            "gone. Put best.json back from a backup; otherwise BEST is written again only by an epoch that improves on it"
        )
    stale = files.storage.temporaries(run_id)
    if stale:
        notes.append(f"{len(stale)} stale temporary file(s) from an interrupted write (ignored; the next writer removes them)")
    if last is None:
        notes.append("nothing committed yet (no LAST)")
    replaced = replacement.describe(files.storage, run_id, detail=True)
    if replaced is not None:
        notes.append(replaced)
    if (attempt_now(files) or {}).get("status") == INTERRUPTED:
        notes.append(f"its last attempt was interrupted (killed or Ctrl-C); resume='auto' continues it {resume_text(last)}")
    for note in notes:
        print(f"note: {note}", file=out)
    for problem in problems:
        print(f"PROBLEM: {problem}", file=out)
    summary = "OK" if not problems else f"{len(problems)} problem(s)"
    print(f"run {run_id}: {summary} ({committed_text(last)}, {len(checked_blobs)} blob(s) verified)", file=out)
    return 1 if problems else 0


def _repair(run_id: str, root: Any, storage: Any, out: TextIO) -> None:
    """``verify --repair``: under the run's lease, settle a replacement its attempt left behind."""
    run_id = resolve_run_id(run_id, storage, where=str(root))
    files = RunFiles(storage, run_id)
    with storage.lease(run_id):  # RunLeaseError while the replacing attempt is alive: nothing to repair
        settled = replacement.settle(files, at=datetime.now(UTC).isoformat(timespec="seconds"))
    print(f"repair: {settled or 'nothing to repair'}", file=out)


def _check_history(files: RunFiles, last: Any, problems: list[str], notes: list[str]) -> None:
    if has_journal(files.storage, files.run_id, files.root):
        return check_journal(files.storage, files.run_id, last, problems, notes, files.root)
    try:
        if last is None:
            raw = parse_history(files.storage.read(files.history)) if files.storage.exists(files.history) else []
            if raw:
                notes.append(f"{len(raw)} history row(s) without a committed LAST (ignored by readers)")
            return
        if not files.storage.exists(files.history):
            problems.append(f"its history (idps.csv) is missing, though LAST committed epoch {last.epoch}: the records "
                            "of every epoch are gone (the checkpoints are intact); put idps.csv back from a backup")
            return
        committed = read_history(files, last)
    except CorruptRunError as exc:
        problems.append(str(exc))
        return
    problems.extend(committed_coverage((r.epoch_idx for r in committed), last, "the history", "rows"))
    problems.extend(continuity_problems(committed, "the history"))
    if tail := history_tail(files, last):
        notes.append(f"{tail} byte(s) of history newer than LAST (an interrupted commit; readers ignore them)")


# -- helpers --------------------------------------------------------------------------------------


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush meets no closed pipe either."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a replaced stdout (a test's, a notebook's): nothing to point
        return
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _table(rows: list[tuple[str, ...]], out: TextIO, indent: str = "") -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out)


if __name__ == "__main__":
    sys.exit(main())
