"""``import nnx`` → ``nnx_api``: NNx's own tests run against this package with no file edited.

A pytest plugin (``-p alias``, this folder on ``PYTHONPATH``) that puts one finder first on
``sys.meta_path``: ``nnx`` and every ``nnx.X.Y`` resolve to the very module object of
``nnx_api`` / ``nnx_api.X.Y`` (the paths ``nnx_api/nnx_paths.py`` declares), registered under both
names, so ``monkeypatch.setattr("nnx.x.y", …)`` and ``from nnx.x import y`` reach the objects the
code under test uses. A public path ``nnx_api`` does not have is a ``ModuleNotFoundError`` naming the
NNx path, as a user renaming the imports would see. Nothing of NNx itself is imported.

Processes the tests start (the DDP tests' ``torchrun`` ranks) import NNx's scenario scripts with no
pytest around them: ``sitecustomize.py`` beside this file, which Python imports at startup from
``PYTHONPATH``, installs the same finder there (so pytest finds this plugin already imported; it has no
assertions to rewrite: PYTEST_DONT_REWRITE).

Private names never block public tests: a test module importing one at its top (``from
nnx.nn.nn_model import _CallbackFinalizer``, ``import nnx._metrics``) is still collected. The name
imports as a placeholder (:class:`PrivateName`) that fails whatever a test does with it, so only the
tests that use it fail; ``run.py`` counts those apart.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import re
import sys
from types import ModuleType

SOURCE = "nnx"
TARGET = "nnx_api"


class PrivateName:
    """Stands for a private name of NNx's that this package does not have: any use raises."""

    def __init__(self, where: str) -> None:
        object.__setattr__(self, "_where", where)

    def _refuse(self, *args, **kwargs):
        raise AttributeError(f"{object.__getattribute__(self, '_where')} is a private name of NNx's that nnx_api does not have")

    __call__ = _refuse
    __iter__ = _refuse

    def __getattr__(self, name):
        self._refuse()

    def __repr__(self) -> str:
        return f"<private name {object.__getattribute__(self, '_where')}: not provided>"


def _private(path: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in path.split("."))


class _PrivateModule(ModuleType):
    """A private NNx module path this package does not have: every name in it is a placeholder."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return PrivateName(f"{self.__name__}.{name}")


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``nnx[.…]`` as the already-importable ``nnx_api[.…]`` module."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102 - the finder protocol
        if fullname != SOURCE and not fullname.startswith(SOURCE + "."):
            return None
        real = TARGET + fullname[len(SOURCE):]
        try:
            module = importlib.import_module(real)
        except ModuleNotFoundError as error:
            if error.name is not None and (error.name == real or real.startswith(error.name + ".")):
                if _private(fullname):
                    spec = importlib.machinery.ModuleSpec(fullname, self)
                    spec.loader_state = _PrivateModule(fullname)
                    spec.loader_state.__spec__ = spec
                    return spec
                return None  # no such path here: the import fails as it would after a rename
            raise
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=hasattr(module, "__path__"))
        spec.loader_state = module
        return spec

    def create_module(self, spec):  # noqa: D102 - the loader protocol
        module: ModuleType = spec.loader_state
        spec.loader_state = module.__spec__  # the import system stamps the alias spec on the module
        return module

    def exec_module(self, module):  # noqa: D102 - the loader protocol
        module.__spec__ = module.__spec__.loader_state  # … give the module back its own


def _only_private_from(path, module: str) -> bool:
    """Whether the test file imports nothing but private names from NNx module ``module``."""
    import ast

    names = [alias.name for node in ast.walk(ast.parse(open(path).read()))
             if isinstance(node, ast.ImportFrom) and node.module == module for alias in node.names]
    return bool(names) and all(name.startswith("_") for name in names)


def _tolerant(importtestmodule):
    """Wrap pytest's test-module import: a top-level import of a private name this package lacks
    binds a :class:`PrivateName` on the module (in this process only), and a module path this
    package lacks that the file imports only private names from is a :class:`_PrivateModule`; then
    the import is retried."""
    missing = re.compile(r"cannot import name '(_\w+)' from '(nnx_api[\w.]*)'")

    def wrapped(path, config):
        for _ in range(50):
            try:
                return importtestmodule(path, config)
            except Exception as error:  # pytest's CollectError, from the ImportError
                cause = error.__cause__
                found = missing.search(str(cause)) if isinstance(cause, ImportError) else None
                if found is not None:
                    name, home = found.groups()
                    setattr(sys.modules[home], name, PrivateName(f"nnx{home[len(TARGET):]}.{name}"))
                elif isinstance(cause, ModuleNotFoundError) and (cause.name or "").startswith(SOURCE + ".") \
                        and _only_private_from(path, cause.name):
                    sys.modules[cause.name] = _PrivateModule(cause.name)
                else:
                    raise
        return importtestmodule(path, config)

    return wrapped


def install() -> None:
    """Put the alias finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())


def pytest_configure(config) -> None:
    """The plugin's hook: make pytest's test-module import tolerant of private names (once)."""
    import _pytest.python

    if not getattr(_pytest.python.importtestmodule, "_nnx_tolerant", False):
        _pytest.python.importtestmodule = _tolerant(_pytest.python.importtestmodule)
        _pytest.python.importtestmodule._nnx_tolerant = True


def pytest_runtest_teardown(item) -> None:
    """Undo what pytest's ``monkeypatch`` does to torch's dynamo config after an item that patched it.

    ``monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 2)`` records no old value (the
    entry lives in the config module's table, not its ``__dict__``), so its undo deletes the
    entry, and torch 2.13's config module hides a deleted entry for the rest of the process:
    every later ``torch.compile`` on that worker then fails with AttributeError. Hidden entries
    come back here with their defaults, as a fresh process would have them."""
    config = sys.modules.get("torch._dynamo.config")
    table = getattr(config, "_config", None) if config is not None else None
    for entry in (table or {}).values():
        if getattr(entry, "hide", False) and not getattr(entry, "alias", None):
            entry.hide = False


install()  # at import: before pytest loads the suite's conftest.py, and in the torchrun children (sitecustomize.py)
