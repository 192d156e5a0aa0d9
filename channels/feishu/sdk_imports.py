"""lark-oapi imported module by module.

lark-oapi's package ``__init__`` files import everything: ``lark_oapi``
imports every API service and ``lark_oapi.api.<service>[.<version>[.model]]`` each import
all of their models (~9,800 modules, 3.1 s and +145 MB at start). ``defer_package_inits``
makes those packages plain namespaces: importing a module by its full path loads that
module and what it imports, no more. Asking such a package for a name it does not have yet
(``lark_oapi.Client``, ``from lark_oapi.api.im.v1 import X``) runs its real ``__init__``
first, so code written against the full SDK still works, only slower to import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from typing import Any


def _deferred(name: str) -> bool:
    return name == "lark_oapi" or name.startswith("lark_oapi.api")


class _DeferredInit(importlib.abc.Loader):
    """Creates the package with its ``__path__``; runs its ``__init__`` on a missing name."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self._real = real

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        real = self._real

        def __getattr__(name: str) -> Any:
            # The import system probes dunders; only ``__all__`` (star imports) needs the init.
            if name.startswith("__") and name != "__all__":
                raise AttributeError(name)
            module.__dict__.pop("__getattr__", None)
            real.exec_module(module)
            return getattr(module, name)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _DeferredInitFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> ModuleSpec | None:
        if not _deferred(fullname):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.submodule_search_locations is None or spec.loader is None:
            return spec
        spec.loader = _DeferredInit(spec.loader)
        return spec


def defer_package_inits() -> None:
    """Install the finder (once). Without it: bench/startup.py Feishu start 3.1 s, +145 MB."""
    if not any(isinstance(f, _DeferredInitFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _DeferredInitFinder())
