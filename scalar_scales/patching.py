"""One mechanism to apply and revert a set of runtime patches, and to say which upstream releases it supports.

Modelled on OpenTelemetry's instrumentors: each patch set declares the
upstream releases it supports (``supports``: distribution -> version
specifier, as ``instrumentation_dependencies()`` does), and each patch is a
row that names the upstream attribute it replaces, the factory that builds
the replacement from the original, and why. ``apply`` refuses an installed
release outside the declaration before it resolves any row, then resolves
every row before it changes anything, so a release inside the declaration
whose internals differ is refused too, and neither gets a half-patch. Both
refusals are :class:`UnsupportedUpstreamError`, in one shape: ``NAME
supports DIST SPECIFIER; DIST VERSION is installed[, but WHAT DIFFERS], so
nothing was patched``. Supporting a new release is one change to the
declaration. ``SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM=1`` patches a release
outside it anyway, with one warning, once every row resolves on it.

``revert`` puts back the exact original objects (classmethod wrappers
included), so ``A.__dict__[name] is original`` holds again afterwards.

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
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from scalar_scales.environment import switch

__all__ = ["ALLOW_UNTESTED_ENV", "Patch", "PatchSet", "UnsupportedUpstreamError", "import_dotted", "within"]

ALLOW_UNTESTED_ENV = "SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM"
"""Set to 1 to patch an upstream release outside a patch set's declaration (at your own risk)."""


class UnsupportedUpstreamError(RuntimeError):
    """The installed upstream is a release, or has internals, that the patch set was not written for."""


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
    """A named group of patches that is applied and reverted as one, for the upstream releases it declares.

    ``supports`` maps each upstream distribution the set patches to the
    version specifier of the releases it supports (``{"sglang":
    ">=0.5.23,<0.5.24"}``): every one of them that is installed must be
    inside its specifier, and at least one must be installed (vLLM is one
    distribution or the other). ``patches`` are the rows, or a function that
    plans them for the installed upstream (raising
    :class:`UnsupportedUpstreamError` where it recognises none), run when the
    set is applied. ``warn`` receives the one line that says a release
    outside the declaration is patched anyway (the opt-in), written once the
    rows have resolved, just before they are patched. A refusal is kept
    (:attr:`refusal`) until ``revert()``, so that a caller reports it once.
    """

    def __init__(
        self,
        name: str,
        patches: Sequence[Patch] | Callable[[], Sequence[Patch]],
        *,
        supports: Mapping[str, str],
        warn: Callable[[str], None] | None = None,
    ):
        self.name = name
        self._rows = patches
        self.supports = dict(supports)
        """Distribution -> the version specifier of the releases this set supports."""
        self._warn: Callable[[str], None] = warn or logging.getLogger(__name__).warning
        self.refusal: UnsupportedUpstreamError | None = None
        """Why the last ``apply`` patched nothing, until ``revert()``."""
        self._originals: list[tuple[Patch, Any, Any]] = []
        self._lock = threading.Lock()
        self._held = False
        """An explicit ``apply()`` holds the patch until ``revert()``."""
        self._blocks = 0
        """``applied()`` blocks open now, in any thread."""

    def accepts(self, distribution: str, version: str) -> bool:
        """Whether release ``version`` of ``distribution`` is one this set declares."""
        specifier = self.supports.get(distribution)
        return specifier is not None and within(version, specifier)

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

    def apply(self) -> str | None:
        """Patch every row, or none; hold the patch until ``revert()``.

        Returns the installed releases the set declares, described
        (``compressed-tensors 0.19.0, transformers 5.17.0``) for the caller's
        one log line, or None when already applied.
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
        """The declaration is checked, then all owners and originals are resolved, before anything changes."""
        if self._originals:
            return None
        try:
            installed, outside = self._declared_releases()
            try:
                rows = [(patch, *patch.resolve()) for patch in self.patches if _installed(patch.requires)]
            except UnsupportedUpstreamError as error:
                raise self._refused(installed, f", but {error}") from None
        except UnsupportedUpstreamError as error:
            self.refusal = error
            raise
        if outside:
            self._warn(self._said(outside, f", patched anyway because {ALLOW_UNTESTED_ENV}=1"))
        replacements = [(patch, owner, original, patch.replace(original)) for patch, owner, original in rows]
        for patch, owner, original, replacement in replacements:
            setattr(owner, patch.attribute, replacement)
            self._originals.append((patch, owner, original))
        return _described(installed)

    def _declared_releases(self) -> tuple[dict[str, str], dict[str, str]]:
        """The installed distributions this set declares, with their versions, and those of them outside their
        specifier, which the opt-in lets through; refuses them otherwise, and refuses where none is installed."""
        installed = {name: version for name in self.supports if (version := _version(name)) is not None}
        if not installed:
            raise UnsupportedUpstreamError(
                f"{self.name} supports {_described(self.supports)}; "
                f"{'none of them is' if len(self.supports) > 1 else 'it is not'} installed, so nothing was patched"
            )
        allowed = switch(ALLOW_UNTESTED_ENV)  # read wherever it would not matter too: a typo is never silent
        outside = {name: version for name, version in installed.items() if not self.accepts(name, version)}
        if outside and not allowed:
            raise self._refused(outside, "", f" ({ALLOW_UNTESTED_ENV}=1 tries anyway)")
        return installed, outside

    def _refused(self, installed: Mapping[str, str], difference: str, hint: str = "") -> UnsupportedUpstreamError:
        """The one shape of a refusal: what the set supports, what is installed, what differs, and that nothing
        was patched."""
        return UnsupportedUpstreamError(self._said(installed, f"{difference}, so nothing was patched{hint}"))

    def _said(self, installed: Mapping[str, str], outcome: str) -> str:
        declared = _described({name: self.supports[name] for name in installed})
        verb = "is" if len(installed) == 1 else "are"
        return f"{self.name} supports {declared}; {_described(installed)} {verb} installed{outcome}"

    def _unpatch(self) -> None:
        while self._originals:
            patch, owner, original = self._originals.pop()
            setattr(owner, patch.attribute, original)


def within(version: str, specifier: str) -> bool:
    """Whether ``version`` matches the PEP 440 ``specifier``; pre- and dev releases inside it do, an unreadable
    version never does.

    ``packaging`` is imported here, not with the module: it is there wherever
    an upstream to patch is (transformers requires it, and compressed-tensors,
    vLLM and SGLang each require transformers), and the command line, which
    never imports this module, needs no dependency.
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion

    try:
        return SpecifierSet(specifier).contains(version, prereleases=True)
    except InvalidVersion:
        return False


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _described(releases: Mapping[str, str]) -> str:
    """``name version, name version``: releases, or declarations (``name specifier``)."""
    return ", ".join(f"{name} {version}" for name, version in releases.items())


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
