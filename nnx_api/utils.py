"""``nnx.utils``: NNx's small printing helpers ``flatten_dict``, ``print_tree``, ``print_table``, as
module functions and as the static methods of ``Utils`` (the very same functions)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["Utils", "flatten_dict", "print_table", "print_tree"]


def flatten_dict(data: Mapping[str, Any], parent_key: str = "", sep: str = ".") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (keys joined with ``sep``)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{parent_key}{sep}{key}" if parent_key else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten_dict(value, name, sep))
        else:
            out[name] = value
    return out


def print_tree(tree: Mapping[str, Any], level: int = 0, *, file: Any = None) -> None:
    """Print a nested mapping as an indented tree (to ``file``, default stdout)."""
    out = file if file is not None else sys.stdout
    if not isinstance(tree, Mapping) or not tree:
        return
    width = max(len(str(key)) for key in tree)
    for key, value in tree.items():
        if isinstance(value, Mapping):
            print(" " * level * 4 + f"[-] {key}: ", file=out)
            print_tree(value, level + 1, file=out)
        else:
            print(" " * level * 4 + f"[+] {str(key).ljust(width)} : {value}", file=out)


def print_table(data: Mapping[str, Any], header: bool = True, title: str | None = None, *, file: Any = None) -> None:
    """Print ``data`` as a two-column key / value table (to ``file``, default stdout)."""
    out = file if file is not None else sys.stdout
    rows = [(str(k), str(v)) for k, v in data.items()]
    left = max([len(k) for k, _ in rows] + [3])
    right = max([len(v) for _, v in rows] + [5])
    rule = f"+-{'-' * left}-+-{'-' * right}-+"
    if title is not None:
        print(f"+{'-' * (left + right + 5)}+", file=out)
        print(f"| {title.center(left + right + 3)} |", file=out)
    print(rule, file=out)
    if header:
        print(f"| {'Key'.center(left)} | {'Value'.center(right)} |", file=out)
        print(rule, file=out)
    for key, value in rows:
        print(f"| {key.center(left)} | {value.center(right)} |", file=out)
    print(rule, file=out)


class Utils:
    """Printing helpers, as static methods (``Utils.print_table(run_details)``): each is the module
    function of the same name."""

    flatten_dict = staticmethod(flatten_dict)
    print_tree = staticmethod(print_tree)
    print_table = staticmethod(print_table)
