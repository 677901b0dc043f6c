"""The plugin's registration, which SGLang runs in every process it starts: cheap, idempotent, never raising.

``register`` only registers: the patch goes in once SGLang imports its model
loader (``sglang.srt.model_loader.loader``), which it does before it builds
any layer, in the processes that load a model. ``SGLANG_PLUGINS`` is
SGLang's own switch: a list without ``scalar_scales`` and SGLang never calls
us. Whatever goes wrong is one warning line through SGLang's logging, never
an error in SGLang's start.
"""

from __future__ import annotations

import logging
import sys

from scalar_scales.import_hook import call_after_import
from scalar_scales.patching import UnsupportedUpstreamError
from sglang_patch.loaders import LOADER_PATCHES, sglang_version

__all__ = ["ENTRY_POINT", "LOADER_MODULE", "apply", "is_applied", "register", "revert"]

ENTRY_POINT = "scalar_scales"
"""Our name in ``sglang.srt.plugins``, the one ``SGLANG_PLUGINS`` lists."""
LOADER_MODULE = "sglang.srt.model_loader.loader"
LOGGER = logging.getLogger("sglang.scalar_scales")
"""Under ``sglang``: SGLang's logging configuration covers it."""


def register() -> None:
    """SGLang's plugin hook: ask to patch the model loader once SGLang imports it."""
    try:
        if LOADER_MODULE in sys.modules:
            _apply_never_raising()
        else:
            call_after_import([LOADER_MODULE], _apply_never_raising)
    except Exception as error:  # reported, never raised into SGLang's start
        LOGGER.warning("scalar-scales: SGLang %s: not registered (%s); nothing patched", sglang_version(), error)


def _apply_never_raising() -> None:
    try:
        apply()
    except Exception as error:  # reported, never raised into SGLang's import
        LOGGER.warning("scalar-scales: SGLang %s: could not patch (%s); nothing patched", sglang_version(), error)


def apply() -> list[str]:
    """Patch the installed SGLang's model loading, with one log line; return what is patched (empty where
    nothing could be, which a warning line says)."""
    try:
        upstream = LOADER_PATCHES.apply()
    except UnsupportedUpstreamError as refusal:
        LOGGER.warning("scalar-scales: %s", refusal)
        return []
    if upstream is not None:
        LOGGER.info("scalar-scales: %s: patched %s", upstream, LOADER_PATCHES.applied_reasons())
    return LOADER_PATCHES.applied_targets()


def revert() -> None:
    """Restore every patched SGLang function exactly."""
    LOADER_PATCHES.revert()


def is_applied() -> bool:
    return LOADER_PATCHES.is_applied()
