"""One mechanism to apply and revert a set of runtime patches.

Modelled on OpenTelemetry's instrumentors: each patch is a row that names the
upstream attribute it replaces, the factory that builds the replacement from
the original, and why. A :class:`PatchSet` resolves every row before it
changes anything, so an upstream whose internals we do not recognise gets a
clear error and no half-patch. ``revert`` puts back the exact original
objects (classmethod wrappers included), so ``A.__dict__[name] is original``
holds again afterwards.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["Patch", "PatchSet", "UnsupportedUpstreamError", "import_dotted"]


class UnsupportedUpstreamError(RuntimeError):
    """The installed upstream is a version or shape we do not know how to patch."""


@dataclass(frozen=True)
class Patch:
    """Replace ``attribute`` of the module or class at dotted path ``owner``.

    ``replace`` receives the original object exactly as stored on the owner
    (a ``classmethod`` stays a ``classmethod``) and returns its replacement.
    ``requires`` names an importable top-level package; rows whose package is
    not installed are skipped, because there is nothing of it to patch.
    """

    owner: str
    attribute: str
    replace: Callable[[Any], Any]
    why: str
    requires: str | None = None

    @property
    def target(self) -> str:
        return f"{self.owner}.{self.attribute}"


class PatchSet:
    """A named group of patches that is applied and reverted as one.

    ``check`` runs before anything is resolved: it raises
    :class:`UnsupportedUpstreamError` for an upstream we refuse, and otherwise
    returns a short description of it (e.g. ``"compressed-tensors 0.19.0"``),
    which ``apply`` returns for the caller's one log line.
    """

    def __init__(self, name: str, patches: list[Patch], check: Callable[[], str]):
        self.name = name
        self.patches = patches
        self.check = check
        self._originals: list[tuple[Patch, Any, Any]] = []
        self._lock = threading.Lock()

    def is_applied(self) -> bool:
        return bool(self._originals)

    def applied_targets(self) -> list[str]:
        return [patch.target for patch, _, _ in self._originals]

    def apply(self) -> str | None:
        """Patch every row, or none: all owners and originals are resolved first.

        Returns the upstream's description, or None when already applied.
        """
        with self._lock:
            if self._originals:
                return None
            upstream = self.check()
            rows = [(patch, *self._resolve(patch)) for patch in self.patches if _installed(patch.requires)]
            replacements = [(patch, owner, original, patch.replace(original)) for patch, owner, original in rows]
            for patch, owner, original, replacement in replacements:
                setattr(owner, patch.attribute, replacement)
                self._originals.append((patch, owner, original))
            return upstream

    def revert(self) -> None:
        """Put back every original object exactly as it was."""
        with self._lock:
            while self._originals:
                patch, owner, original = self._originals.pop()
                setattr(owner, patch.attribute, original)

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Apply for the duration of a ``with`` block; revert only what this block applied."""
        was_applied = self.is_applied()
        self.apply()
        try:
            yield
        finally:
            if not was_applied:
                self.revert()

    def _resolve(self, patch: Patch) -> tuple[Any, Any]:
        owner = import_dotted(patch.owner)
        if owner is None or patch.attribute not in vars(owner):
            raise UnsupportedUpstreamError(
                f"{self.name}: {patch.target} not found; this upstream version's internals are not "
                f"recognised, so nothing was patched"
            )
        return owner, vars(owner)[patch.attribute]


def _installed(package: str | None) -> bool:
    if package is None:
        return True
    return importlib.util.find_spec(package) is not None


def import_dotted(path: str) -> Any:
    """Import ``a.b.C`` as module ``a.b`` then attribute ``C``, or a module outright."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            obj = getattr(obj, name, None)
            if obj is None:
                return None
        return obj
    return None
