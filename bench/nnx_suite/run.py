"""``make nnx-suite``: NNx 0.4.1's own tests, the in-scope files, run against ``nnx_api``.

1. the sdist ``thekaveh-nnx==0.4.1`` is downloaded once into ``build/nnx-suite/`` (ignored; nothing
   of NNx's is committed), and its ``tests/`` and ``pyproject.toml`` (the suite's pytest settings)
   extracted beside it: NNx's package code is never extracted;
2. pytest runs the in-scope files (``scope.py``) there, with ``alias.py`` mapping ``import nnx``
   onto ``nnx_api`` — no test file is edited;
3. every item is counted: passed, failed on wording only (the exception type is NNx's, the message
   ours), failed, skipped; items that reach a private name (``_x``) of the package count apart;
4. each failure is looked up in ``kept.py`` (kept with a reason); ``--record`` rewrites
   ``recorded.json``, which ``tests/compat/test_nnx_suite.py`` holds the tree to.

Usage: ``python bench/nnx_suite/run.py [--record] [--markdown FILE] [-k EXPR] [files …]``.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import re
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

import scope  # noqa: E402
from kept import CLASSES, DISPOSITIONS, HANGS, OUT_OF_SCOPE, PRIVATE  # noqa: E402

VERSION = "0.4.1"
WORK = REPO / "build" / "nnx-suite"
TREE = WORK / "tree"
RECORDED = HERE / "recorded.json"
OUT_OF_SCOPE_ERROR = re.compile(r"OutOfScopeError|No module named 'nnx\.(diffusion|embeddings|bundles?|provenance|abstention|"
                          r"calibration|peft|quantize|surgery|generation|interop|paradigms)")
WORDING = re.compile(r"Regex pattern did not match|Pattern '.*' does not match|DID NOT WARN|does not match")


def fetch() -> Path:
    """The sdist's tests, extracted under ``build/nnx-suite/tree`` (downloaded once)."""
    WORK.mkdir(parents=True, exist_ok=True)
    archive = WORK / f"thekaveh_nnx-{VERSION}.tar.gz"
    if not archive.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"thekaveh-nnx=={VERSION}", "-d", str(WORK)], check=True)
    if not (TREE / "tests" / "conftest.py").exists():
        prefix = f"thekaveh_nnx-{VERSION}/"
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers()
                       if m.name.startswith(prefix + "tests/") or m.name == prefix + "pyproject.toml"]
            for member in members:
                member.name = member.name[len(prefix):]
            tar.extractall(TREE, members=members, filter="data")
    return TREE


STDLIB_MODULES = frozenset({"os", "fcntl", "tempfile", "shutil", "time", "threading", "subprocess", "socket",
                            "hashlib", "json", "pickle", "random", "io", "sys", "signal", "warnings"})
"""Module names a test may patch on one of NNx's modules (``monkeypatch.setattr(nn_run, "os", …)``):
reaching into how NNx implements a module, as a private name does."""


def private_items(tree: Path, files: list[str]) -> set[str]:
    """``file::test`` of every test function that reaches NNx's internals: a private name of the
    package (``nnx._x``, ``nnx.a._x``, ``from nnx… import _x``, ``obj._x`` on an object the test file
    does not define), or a standard module patched on one of NNx's modules; through the module-level
    helpers and fixtures the test calls or requests."""
    return set().union(*(_private_in(name, (tree / "tests" / name).read_text()) for name in files))


_DOTTED = re.compile(r"\bnnx(?:\.[A-Za-z]\w*)*\._[a-z]\w*")


def _private_in(name: str, source: str) -> set[str]:
    """``private_items`` for one test file's source."""
    found: set[str] = set()
    module = ast.parse(source)
    private_imports = {alias.asname or alias.name for node in ast.walk(module)
                       if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "nnx"
                       for alias in node.names if alias.name.startswith("_")}
    nnx_modules = {alias.asname or alias.name.split(".")[0] for node in ast.walk(module)
                   if isinstance(node, ast.Import) for alias in node.names if alias.name.split(".")[0] == "nnx"}
    nnx_modules |= {alias.asname or alias.name for node in ast.walk(module)
                    if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "nnx"
                    for alias in node.names if alias.name[:1].islower()}
    foreign = {alias.asname or alias.name.split(".")[0] for node in ast.walk(module)
               if isinstance(node, ast.Import) for alias in node.names if alias.name.split(".")[0] != "nnx"}
    foreign |= {alias.asname or alias.name for node in ast.walk(module)
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] not in ("nnx", "")
                for alias in node.names}
    own = {node.attr for node in ast.walk(module) if isinstance(node, ast.Attribute)
           and isinstance(node.ctx, ast.Store)}
    own |= {node.name for node in ast.walk(module) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    helpers = {node.name: node for node in module.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}

    def internal(node: ast.AST) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr.startswith("_") and not sub.attr.startswith("__") \
                    and sub.attr not in own and _root(sub) not in foreign:
                return True
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "setattr" \
                    and len(sub.args) >= 2 and isinstance(sub.args[0], ast.Name) \
                    and sub.args[0].id in nnx_modules and isinstance(sub.args[1], ast.Constant) \
                    and (sub.args[1].value in STDLIB_MODULES or str(sub.args[1].value).startswith("_")):
                return True
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and _DOTTED.search(sub.value):
                return True
        return False

    def reaches(node: ast.AST, seen: set[str]) -> bool:
        text = ast.get_source_segment(source, node) or ""
        if _DOTTED.search(text) or any(re.search(rf"\b{re.escape(p)}\b", text) for p in private_imports):
            return True
        if internal(node):
            return True
        called = {sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name)}
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            called |= {arg.arg for arg in node.args.args}  # fixtures it requests
        for helper in sorted(called & helpers.keys() - seen):
            seen.add(helper)
            if reaches(helpers[helper], seen):
                return True
        return False

    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            if reaches(node, {node.name}):
                found.add(f"{name}::{node.name}")
    return found


def _root(node: ast.AST) -> str:
    """The name an attribute chain starts from (``torch`` for ``torch._dynamo.reset``), or ""."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def uncollected(tree: Path, report_items: dict[str, dict[str, str]], files: list[str]) -> dict[str, dict[str, str]]:
    """The items of files pytest could not import, one per test function (its parameters unknown),
    each failed with the collection error (out of scope where the error is the refusal of an
    out-of-scope feature at the file's top): a whole file never counts as one item; and the items
    ``HANGS`` names, which ``run_pytest`` leaves out, failed."""
    items = {key: item for key, item in report_items.items() if not key.startswith(".py::")}
    items.update({key: {"outcome": "failed", "message": f"not run (it hangs here): {reason}"}
                  for key, reason in HANGS.items() if key.split("::")[0] in files})
    for key, item in report_items.items():
        if not key.startswith(".py::"):
            continue
        file = key.split("::")[1].rpartition(".")[2] + ".py"
        module = ast.parse((tree / "tests" / file).read_text())
        for node in ast.walk(module):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                outcome = "out-of-scope" if item["outcome"] == "out-of-scope" else "failed"
                items[f"{file}::{node.name}"] = {"outcome": outcome, "message": item["message"]}
    return items


def run_pytest(tree: Path, files: list[str], extra: list[str], workers: str | None = None,
               log: Path | None = None) -> Path:
    """Run pytest over ``files`` in the extracted tree, in a user's environment (no setting of this
    project's own test run, such as ``NNX_PROGRESS=0``, leaks in); the JUnit XML report's path.
    ``log``: write pytest's output there instead of to this process's."""
    report = WORK / f"report-{os.getpid()}.xml"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTEST_ADDOPTS", "NNX_PROGRESS")}
    env.update(PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]), NNX_TQDM_DISABLE="1")  # HERE: alias, sitecustomize
    command = [sys.executable, "-m", "pytest", "-p", "alias", "-p", "no:randomly", "-p", "no:cacheprovider", "-q",
               "--tb=line", "-o", "addopts=", "--continue-on-collection-errors", "--durations=25", "--timeout=300",
               f"--junitxml={report}", "-n", workers or os.environ.get("NNX_SUITE_WORKERS", "auto"), "--dist", "worksteal",
               *extra, *[arg for key in HANGS if key.split("::")[0] in files for arg in ("--deselect", f"tests/{key}")],
               *[f"tests/{name}" for name in files]]
    if log is None:
        subprocess.run(command, cwd=tree, env=env, check=False)
    else:
        with log.open("w") as out:
            subprocess.run(command, cwd=tree, env=env, check=False, stdout=out, stderr=subprocess.STDOUT)
    return report


def outcomes(report: Path) -> dict[str, dict[str, str]]:
    """``file::test[param]`` → ``{"outcome": passed|failed|skipped, "message": …}`` from the report."""
    items: dict[str, dict[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        file = (module[1] if len(module) > 1 and module[0] == "tests" else module[0]) + ".py"
        klass = module[2:] if module[0] == "tests" else module[1:]
        key = "::".join([file, *klass, case.get("name", "")])
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                message = child.get("message") or ""
                if message == "collection failure":  # the traceback's last lines name the error
                    message = "collection failure: " + " ".join((child.text or "").split())[-380:]
                outcome = "failed"
            elif child.tag == "skipped":
                outcome, message = "skipped", child.get("message") or ""
        if outcome == "failed" and WORDING.search(message):
            outcome = "wording"
        elif outcome == "failed" and OUT_OF_SCOPE_ERROR.search(message):
            outcome = "out-of-scope"
        items[key] = {"outcome": outcome, "message": " ".join(message.split())[:400]}
    return items


def base_test(key: str) -> str:
    """``file::test`` without a class or parameters."""
    parts = key.split("::")
    return f"{parts[0]}::{parts[-1].split('[')[0]}"


FAILING = ("failed", "wording")
"""The outcomes of an item that did not pass."""


def side(key: str, item: dict[str, str], private: set[str]) -> str:
    """Which count an item belongs to: ``private`` (reaches NNx's internals), ``out-of-scope`` (ran
    into this package's typed refusal of an out-of-scope feature) or ``public``."""
    if base_test(key) in private or any(fnmatch.fnmatchcase(key, pattern) for pattern in PRIVATE):
        return "private"
    if item["outcome"] == "out-of-scope" or any(fnmatch.fnmatchcase(key, pattern) for pattern in OUT_OF_SCOPE):
        return "out-of-scope"
    return "public"


def summarise(items: dict[str, dict[str, str]], private: set[str]) -> dict[str, dict[str, int]]:
    """Counts by outcome, for the public, private and out-of-scope items apart."""
    counts: dict[str, dict[str, int]] = {"public": {}, "private": {}, "out-of-scope": {}}
    for key, item in items.items():
        bucket = counts[side(key, item, private)]
        bucket[item["outcome"]] = bucket.get(item["outcome"], 0) + 1
    return counts


def rates(counts: dict[str, int]) -> tuple[int, int, int, float, float]:
    """(items run, passed, wording only, % passed as written, % passed counting wording); skipped
    items are not run."""
    run_ = sum(n for outcome, n in counts.items() if outcome != "skipped")
    passed, wording = counts.get("passed", 0), counts.get("wording", 0)
    return run_, passed, wording, 100 * passed / max(run_, 1), 100 * (passed + wording) / max(run_, 1)


def disposition(key: str) -> tuple[str, str] | None:
    """The entry of ``kept.py`` a failing item id matches, if any."""
    for pattern, entry in DISPOSITIONS.items():
        if fnmatch.fnmatchcase(key, pattern):
            return entry
    return None


def problems(items: dict[str, dict[str, str]], private: set[str]) -> list[str]:
    """Failing public items with no entry, and entries that match no failing public item."""
    failing = [key for key, item in items.items() if item["outcome"] in FAILING and side(key, item, private) == "public"]
    found = [f"{key}: {items[key]['message'][:160]}" for key in sorted(failing) if disposition(key) is None]
    used = {pattern for pattern in DISPOSITIONS for key in failing if fnmatch.fnmatchcase(key, pattern)}
    found += [f"entry {pattern!r} matches no failing item: remove it from bench/nnx_suite/kept.py"
              for pattern in sorted(set(DISPOSITIONS) - used)]
    return found


def scope_table() -> str:
    """The files of the sdist's suite, in scope and out, grouped by their reason (``scope.py``)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name, (where, reason) in sorted(scope.FILES.items()):
        groups.setdefault((where, reason), []).append(name)
    lines = ["| scope | why | files |", "|---|---|---|"]
    for (where, reason), names in sorted(groups.items(), key=lambda kv: (kv[0][0] != scope.IN, kv[0][1])):
        lines.append(f"| {where} | {reason} | {', '.join(f'`{name}`' for name in names)} |")
    return "\n".join(lines) + "\n"


def markdown(items: dict[str, dict[str, str]], private: set[str]) -> str:
    """The tables of docs/nnx-compat.md: the counts, then every kept failure by class and reason."""
    counts = summarise(items, private)
    lines = ["| items | run | passed as written | passed counting wording | failed | skipped |", "|---|---|---|---|---|---|"]
    for name in ("public", "private", "out-of-scope"):
        run_, passed, wording, as_written, with_wording = rates(counts[name])
        failed = run_ - passed - wording
        lines.append(f"| {name} | {run_} | {passed} ({as_written:.1f}%) | {passed + wording} ({with_wording:.1f}%) "
                     f"| {failed} | {counts[name].get('skipped', 0)} |")
    groups: dict[tuple[str, str], list[str]] = {}
    for key, item in sorted(items.items()):
        if item["outcome"] in FAILING and side(key, item, private) == "public":
            klass, reason = disposition(key) or ("unexplained", "no entry in bench/nnx_suite/kept.py")
            groups.setdefault((klass, reason), []).append(key)
    lines += ["", "| class | why it is kept | items |", "|---|---|---|"]
    order = {klass: i for i, klass in enumerate(CLASSES)}
    for (klass, reason), keys in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], -1), kv[0][1])):
        shown = ", ".join(f"`{key}`" for key in keys[:6]) + (f" (+{len(keys) - 6})" if len(keys) > 6 else "")
        lines.append(f"| {klass} | {reason} | {shown} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Fetch, run, count, print; ``--record`` rewrites ``recorded.json``; exit 1 on an unexplained
    failure or a stale entry when every in-scope file ran."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="test file names (default: every in-scope file)")
    parser.add_argument("--record", action="store_true", help="rewrite bench/nnx_suite/recorded.json")
    parser.add_argument("--markdown", metavar="FILE", help="write the docs tables to FILE")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    args = parser.parse_args(argv)
    files = args.files or scope.in_scope()
    tree = fetch()
    report = run_pytest(tree, files, ["-k", args.keyword] if args.keyword else [])
    items = uncollected(tree, outcomes(report), files)
    report.unlink()
    private = private_items(tree, files)
    counts = summarise(items, private)
    for name in ("public", "private", "out-of-scope"):
        run_, passed, wording, as_written, with_wording = rates(counts[name])
        print(f"nnx-suite {name}: {run_} items run, {passed} passed ({as_written:.1f}%), {wording} wording only "
              f"({with_wording:.1f}% counting wording), {run_ - passed - wording} failed, "
              f"{counts[name].get('skipped', 0)} skipped")
    if args.record:
        RECORDED.write_text(json.dumps({"version": VERSION, "files": files, "items": items,
                                        "private": sorted(private)}, indent=1, sort_keys=True) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(markdown(items, private))
    if args.files or args.keyword:
        return 0
    found = problems(items, private)
    for line in found:
        print("nnx-suite: " + line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
