"""ordo 0.4's import paths (``producer``, ``arbiter``, ``consumer``, ``schemas``, ``kernel``), kept for one release.

Since 0.5 everything installs under ``ordo`` (``ordo.producer``, ...). ``import producer.table`` still works
until 0.6, with a ``DeprecationWarning`` naming the new path, and gives the very module ``ordo.producer.table``
is (one module object per file, so classes, registries and ``isinstance`` stay one).

Two ways in, both ending in :func:`alias`:

* an installed ordo puts ``ordo-legacy.pth`` into site-packages (``setup.py``), which calls :func:`install`: a
  finder placed *last* on ``sys.meta_path`` answers the five old names only when nothing else on the path does,
  so another project's ``schemas`` or ``kernel`` package is never shadowed;
* in a checkout, the repository folders are themselves importable by their old names (the current directory is
  on ``sys.path``); each folder's ``__init__`` sees it was imported under its old name and calls :func:`alias`.

Either way the old name's submodules then resolve through :class:`_Submodules` (first on ``sys.meta_path``, but
only for names under an old name already aliased here).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

OLD_NAMES = {name: f"ordo.{name}" for name in ("producer", "arbiter", "consumer", "schemas", "kernel")}
REMOVED_IN = "0.6"


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"`import {old}` is ordo 0.4's path, kept until ordo {REMOVED_IN}: import `{new}` instead "
        f"(or the entry point `from ordo import ...`)",
        DeprecationWarning,
        stacklevel=4,
    )


class _AliasLoader(importlib.abc.Loader):
    """Loads an old name as the module of its new name (imported once; the old name is bound to it)."""

    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its new name."""


def _target(fullname: str) -> str | None:
    head, _, rest = fullname.partition(".")
    new = OLD_NAMES.get(head)
    if new is None:
        return None
    return f"{new}.{rest}" if rest else new


class _TopLevel(importlib.abc.MetaPathFinder):
    """The five old top-level names, last on ``sys.meta_path`` (only when no other package answers them)."""

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if fullname not in OLD_NAMES:
            return None
        _warn(fullname, OLD_NAMES[fullname])
        return importlib.util.spec_from_loader(fullname, _AliasLoader(OLD_NAMES[fullname]))


class _Submodules(importlib.abc.MetaPathFinder):
    """``producer.table`` and the like, once ``producer`` is an alias of ``ordo.producer``."""

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        head = fullname.partition(".")[0]
        new = _target(fullname)
        if new is None or fullname == head:
            return None
        aliased = sys.modules.get(head)
        if aliased is None or aliased is not sys.modules.get(OLD_NAMES[head]):
            return None  # the old name is another project's package, or not imported here
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install() -> None:
    """Make the old paths resolve (``ordo-legacy.pth`` runs this at interpreter start-up)."""
    if not any(isinstance(finder, _TopLevel) for finder in sys.meta_path):
        sys.meta_path.append(_TopLevel())
    if not any(isinstance(finder, _Submodules) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Submodules())


def alias(old: str) -> ModuleType:
    """Bind ``old`` to its ``ordo.`` module: called by a repository folder's ``__init__`` run under its old name.

    The import system takes whatever ``sys.modules[old]`` holds once the ``__init__`` returns, so the old name
    becomes the new module rather than a second copy of it.
    """
    _warn(old, OLD_NAMES[old])
    install()
    module = importlib.import_module(OLD_NAMES[old])
    sys.modules[old] = module
    return module
