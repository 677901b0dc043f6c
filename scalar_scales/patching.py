"""One mechanism to apply and revert a set of runtime patches.

Modelled on OpenTelemetry's instrumentors: each patch is a row that names the
upstream attribute it replaces, the factory that builds the replacement from
the original, and why. A :class:`PatchSet` resolves every row before it
changes anything, so an upstream whose internals we do not recognise gets a
clear error and no half-patch. ``revert`` puts back the exact original
objects (classmethod wrappers included), so ``A.__dict__[name] is original``
holds again afterwards.

A patch is process-wide, so ``applied()`` blocks are counted: the patch
stays applied until the last open block exits, whichever thread opened it.
An explicit ``apply()`` holds it until ``revert()``.

Every package holds each of its patch sets the same way: one module-level
:class:`PatchSet`. Where the rows depend on which upstream is installed (vLLM's
MoE loader lives on one class or another), the set is given a function that
plans them, run when the set is first applied.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
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
    ``parameters``, where the replacement calls the original by its
    parameters, is what the original must take; an original that takes
    anything else is not the code the replacement was written for.
    """

    owner: str
    attribute: str
    replace: Callable[[Any], Any]
    why: str
    requires: str | None = None
    parameters: tuple[str, ...] | None = None

    @property
    def target(self) -> str:
        return f"{self.owner}.{self.attribute}"

    def resolve(self) -> tuple[Any, Any]:
        """The owner and the original as the installed upstream has them; refuses code this row was not written for."""
        owner = import_dotted(self.owner)
        if owner is None or self.attribute not in vars(owner):
            raise UnsupportedUpstreamError(f"{self.target} not found")
        original = vars(owner)[self.attribute]
        if self.parameters is not None:
            found = _parameters(original)
            if found != self.parameters:
                raise UnsupportedUpstreamError(f"{self.target} takes {found}, not {self.parameters}")
        return owner, original


def _parameters(function: Any) -> tuple[str, ...] | None:
    function = getattr(function, "__func__", function)
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None


class PatchSet:
    """A named group of patches that is applied and reverted as one.

    ``patches`` are the rows, or a function that plans them for the
    installed upstream (raising :class:`UnsupportedUpstreamError` where it
    recognises none), run when the set is applied. ``check`` runs before
    anything is resolved: it raises :class:`UnsupportedUpstreamError` for an
    upstream we refuse, and otherwise returns a short description of it
    (e.g. ``"compressed-tensors 0.19.0"``), which ``apply`` returns for the
    caller's one log line. A refusal is kept (:attr:`refusal`) until
    ``revert()``, so that a caller reports it once.
    """

    def __init__(self, name: str, patches: Sequence[Patch] | Callable[[], Sequence[Patch]], check: Callable[[], str]):
        self.name = name
        self._rows = patches
        self.check = check
        self.refusal: UnsupportedUpstreamError | None = None
        """Why the last ``apply`` patched nothing, until ``revert()``."""
        self._originals: list[tuple[Patch, Any, Any]] = []
        self._lock = threading.Lock()
        self._held = False
        """An explicit ``apply()`` holds the patch until ``revert()``."""
        self._blocks = 0
        """``applied()`` blocks open now, in any thread."""

    def is_applied(self) -> bool:
        return bool(self._originals)

    @property
    def patches(self) -> list[Patch]:
        """The rows for the installed upstream (planned now, where a function plans them)."""
        return list(self._rows() if callable(self._rows) else self._rows)

    def applied_targets(self) -> list[str]:
        return [patch.target for patch, _, _ in self._originals]

    def applied_reasons(self) -> str:
        """What is patched now and why, for a log line: ``a, b (why); c (why)``, rows of one reason together."""
        reasons: dict[str, list[str]] = {}
        for patch, _, _ in self._originals:
            reasons.setdefault(patch.why, []).append(patch.attribute)
        return "; ".join(f"{', '.join(attributes)} ({why})" for why, attributes in reasons.items())

    def targets(self) -> list[str]:
        """What ``apply`` would patch here: the targets of the rows whose package is installed."""
        return [patch.target for patch in self.patches if _installed(patch.requires)]

    def apply(self) -> str | None:
        """Patch every row, or none; hold the patch until ``revert()``.

        Returns the upstream's description, or None when already applied.
        """
        with self._lock:
            upstream = self._patch()
            self._held = True
            return upstream

    def revert(self) -> None:
        """Put back every original object exactly as it was, now, even inside ``applied()`` blocks; forget a
        refusal."""
        with self._lock:
            self._held = False
            self.refusal = None
            self._unpatch()

    @contextmanager
    def applied(self) -> Iterator[None]:
        """Apply for the duration of a ``with`` block; revert when the last open block exits (unless held)."""
        with self._lock:
            self._patch()
            self._blocks += 1
        try:
            yield
        finally:
            with self._lock:
                self._blocks -= 1
                if not self._blocks and not self._held:
                    self._unpatch()

    def _patch(self) -> str | None:
        """All owners and originals are resolved before anything changes."""
        if self._originals:
            return None
        try:
            upstream = self.check()
        except UnsupportedUpstreamError as error:
            self.refusal = error
            raise
        try:
            rows = [(patch, *patch.resolve()) for patch in self.patches if _installed(patch.requires)]
        except UnsupportedUpstreamError as error:
            self.refusal = UnsupportedUpstreamError(
                f"{self.name}: {error}; this upstream version's internals are not recognised, so nothing was patched"
            )
            raise self.refusal from None
        replacements = [(patch, owner, original, patch.replace(original)) for patch, owner, original in rows]
        for patch, owner, original, replacement in replacements:
            setattr(owner, patch.attribute, replacement)
            self._originals.append((patch, owner, original))
        return upstream

    def _unpatch(self) -> None:
        while self._originals:
            patch, owner, original = self._originals.pop()
            setattr(owner, patch.attribute, original)


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
