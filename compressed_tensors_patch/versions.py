"""Which upstream code the producer patch knows: recognised by the code it runs, not by a version string.

For every upstream function the patch wraps or depends on, ``tested_upstream``
records a fingerprint of its source (SHA-256 of ``inspect.getsource``) for
each release the tests ran against. ``scripts/fingerprints.py`` writes that
file from the installed packages, in each test environment; it is never
edited by hand, and ``tests/producer/test_fingerprints.py`` fails when it is
stale. An installed upstream is accepted when each of its functions has a
tested fingerprint, so a release that changed none of them (compressed-tensors
0.20.1, say) is accepted as it is. Any other is refused with nothing
patched, naming each function whose code differs, unless
``SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM=1`` asks to try anyway (with a
warning).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from compressed_tensors_patch.tested_upstream import TESTED
from scalar_scales.environment import switch
from scalar_scales.patching import UnsupportedUpstreamError, import_dotted

__all__ = [
    "ALLOW_UNTESTED_ENV",
    "DEPENDENCIES",
    "check_tested",
    "distribution_of",
    "fingerprint",
    "native_support",
    "tested_releases",
    "untested",
]

ALLOW_UNTESTED_ENV = "SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM"
"""Set to 1 to patch an upstream whose code differs from every tested release (at your own risk)."""

_QUANTIZATION_CONFIG = "compressed_tensors.quantization.quant_config.QuantizationConfig"
DEPENDENCIES: tuple[str, ...] = (
    "compressed_tensors.compressors.model_compressors.model_compressor.ModelCompressor.add_decompress_hook",
    _QUANTIZATION_CONFIG,
)
"""Upstream code the patch relies on without wrapping it: the decompression hook that ours must run before,
and the config class whose fields tell native support apart."""

_DISTRIBUTIONS = {"compressed_tensors": "compressed-tensors"}
"""Import name -> distribution name, where they differ."""


def fingerprint(target: str) -> str | None:
    """The fingerprint of the installed ``target`` (dotted path), or None where it does not exist."""
    owner_path, _, attribute = target.rpartition(".")
    owner = import_dotted(owner_path)
    code: Any = vars(owner).get(attribute) if owner is not None else None
    if code is None:
        return None
    code = getattr(code, "__func__", code)
    try:
        source = inspect.getsource(inspect.unwrap(code))
    except (OSError, TypeError):
        return None
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def distribution_of(target: str) -> str:
    """``package version`` of the distribution that provides ``target``, as the record labels releases."""
    name = _DISTRIBUTIONS.get(target.split(".")[0], target.split(".")[0])
    try:
        return f"{name} {metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return f"{name} (not installed)"


def tested_releases(target: str) -> list[str]:
    return sorted({release for releases in TESTED.get(target, {}).values() for release in releases})


def untested(targets: Iterable[str]) -> list[str]:
    """The targets whose installed code matches no tested fingerprint (or is missing)."""
    return [target for target in targets if fingerprint(target) not in TESTED.get(target, {})]


def check_tested(targets: Iterable[str], *, name: str, warn: Any) -> str:
    """Refuse upstream code we have not tested, naming each function that differs; describe the upstream.

    With ``SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM=1`` the refusal becomes one
    ``warn(message)`` and the patch goes on.
    """
    targets = list(targets)
    differing = untested(targets)
    if differing:
        described = "; ".join(map(_described, differing))
        message = f"{name}: the installed code of {described} differs from every tested release"
        if not switch(ALLOW_UNTESTED_ENV):
            raise UnsupportedUpstreamError(f"{message}; nothing was patched ({ALLOW_UNTESTED_ENV}=1 tries anyway)")
        warn(f"{message}; patching anyway because {ALLOW_UNTESTED_ENV}=1")
    return ", ".join(sorted({distribution_of(target) for target in targets}))


def _described(target: str) -> str:
    """``Owner.function (what is installed; tested: ...)`` for a refusal."""
    short = ".".join(target.split(".")[-2:])
    installed = distribution_of(target) if fingerprint(target) is not None else "cannot be imported here"
    tested: dict[str, list[str]] = {}
    for release in tested_releases(target):
        package, _, version = release.partition(" ")
        tested.setdefault(package, []).append(version)
    releases = "; ".join(f"{package} {', '.join(versions)}" for package, versions in tested.items()) or "none"
    return f"{short} ({installed}; tested: {releases})"


def native_support() -> str | None:
    """The installed compressed-tensors, described, if it writes 0-D global scales itself; else None.

    A release with the change (upstream/compressed-tensors.patch) declares
    ``QuantizationConfig.format_version``; there is then nothing to patch,
    so this is checked before the code check.
    """
    try:
        metadata.version("compressed-tensors")
    except metadata.PackageNotFoundError:
        return None
    config = import_dotted(_QUANTIZATION_CONFIG)
    if config is None or "format_version" not in config.model_fields:
        return None
    return distribution_of(_QUANTIZATION_CONFIG)
