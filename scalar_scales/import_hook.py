"""Run a callback right after one of a few modules is first imported, without importing it ourselves."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

__all__ = ["call_after_import", "once_imported"]

_lock = threading.Lock()


def call_after_import(modules: Iterable[str], callback: Callable[[], Any]) -> None:
    """Call ``callback`` once, just after the first of ``modules`` finishes executing."""
    watched = frozenset(modules)
    with _lock:
        if not any(
            isinstance(finder, _AfterImport) and (finder.modules, finder.callback) == (watched, callback)
            for finder in sys.meta_path
        ):
            sys.meta_path.insert(0, _AfterImport(watched, callback))


def once_imported(modules: Iterable[str], callback: Callable[[], Any]) -> None:
    """Call ``callback`` now if one of ``modules`` is imported already, else just after the first of them is."""
    modules = list(modules)
    if any(module in sys.modules for module in modules):
        callback()
    else:
        call_after_import(modules, callback)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it lets the other finders find a watched module and wraps its loader."""

    def __init__(self, modules: frozenset[str], callback: Callable[[], Any]):
        self.modules = modules
        self.callback = callback

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> Any:
        if fullname not in self.modules:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _CallbackLoader(spec.loader, self)
                return spec
        return None

    def fired(self) -> None:
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)
        self.callback()


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, finder: _AfterImport):
        self.loader = loader
        self.finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.finder.fired()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
