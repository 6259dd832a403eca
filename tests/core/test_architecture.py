"""nnx_core stays framework-agnostic: no torch, numpy or file I/O (everything goes through ports)."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "nnx_core"
ALLOWED_ROOTS = {
    "__future__", "abc", "attrs", "cattrs", "collections", "contextlib", "csv", "dataclasses", "datetime",
    "enum", "functools", "gc", "hashlib", "io", "itertools", "json", "math", "numbers", "re", "types", "typing", "warnings",
    "nnx_core",
}
FORBIDDEN_CALLS = {"open", "exec", "eval"}


def _imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module.split(".")[0]


def test_core_imports_only_stdlib_attrs_and_cattrs():
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        offenders += [f"{path.name}: {name}" for name in _imports(tree) if name not in ALLOWED_ROOTS]
    assert offenders == []


def test_core_does_no_file_io():
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
                offenders.append(f"{path.name}:{node.lineno} {node.func.id}()")
            if isinstance(node, ast.Attribute) and node.attr in {"sleep", "fsync", "replace", "unlink"} and \
                    isinstance(node.value, ast.Name) and node.value.id in {"os", "time"}:
                offenders.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
    assert offenders == []


def test_ports_are_protocols():
    from typing import Protocol

    from nnx_core.ports import iter_protocols

    assert all(Protocol in port.__mro__ for port in iter_protocols())
