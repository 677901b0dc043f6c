"""The plugin's registration, which SGLang runs in every process it starts: cheap, idempotent, never raising.

``register`` only registers: the patch goes in once SGLang has imported its
model loader (``sglang.srt.model_loader.loader``), at once where it already
has (its scheduler imports the loader before it loads plugins), and before
any layer is built. ``SGLANG_PLUGINS`` is SGLang's own switch: a list without
``scalar_scales`` and SGLang never calls us. The one log line goes through
SGLang's logging when SGLang first loads weights, by when SGLang has set its
logging up (it loads plugins before). Whatever goes wrong is one warning
line, never an error in SGLang's start. Nothing here imports torch: the
patches (:mod:`sglang_patch.loaders`) are imported by :func:`apply`, once
SGLang has imported its loader, so that where SGLang or torch is not
installed, importing the plugin and registering it do nothing, quietly.
"""

from __future__ import annotations

import sys

from scalar_scales.import_hook import once_imported
from scalar_scales.patching import UnsupportedUpstreamError
from sglang_patch.declared import LOGGER, sglang_version

__all__ = ["ENTRY_POINT", "LOADER_MODULE", "apply", "is_applied", "register", "revert"]

ENTRY_POINT = "scalar_scales"
"""Our name in ``sglang.srt.plugins``, the one ``SGLANG_PLUGINS`` lists."""
LOADER_MODULE = "sglang.srt.model_loader.loader"


def register() -> None:
    """SGLang's plugin hook: ask to patch the model loader once SGLang has imported it."""
    try:
        once_imported([LOADER_MODULE], _apply_never_raising)
    except Exception as error:  # reported, never raised into SGLang's start
        LOGGER.warning("scalar-scales: SGLang %s: not registered (%s); nothing patched", sglang_version(), error)


def _apply_never_raising() -> None:
    try:
        apply()
    except Exception as error:  # reported, never raised into SGLang's import
        LOGGER.warning("scalar-scales: SGLang %s: could not patch (%s); nothing patched", sglang_version(), error)


def apply() -> list[str]:
    """Patch the installed SGLang's model loading; return what is patched (empty where nothing could be, which
    one warning line says). The line that says what is patched is written at the first load."""
    from sglang_patch.loaders import LOADER_PATCHES, announce_at_first_load

    if LOADER_PATCHES.refusal is not None:
        return []
    try:
        upstream = LOADER_PATCHES.apply()
    except UnsupportedUpstreamError as refusal:
        LOGGER.warning("scalar-scales: SGLang %s: %s", sglang_version(), refusal)
        return []
    if upstream is not None:
        reasons = LOADER_PATCHES.applied_reasons()
        announce_at_first_load(lambda: LOGGER.info("scalar-scales: SGLang %s: patched %s", sglang_version(), reasons))
    return LOADER_PATCHES.applied_targets()


def revert() -> None:
    """Restore every patched SGLang function exactly (nothing to do where the patches were never imported)."""
    if _LOADERS in sys.modules:
        from sglang_patch.loaders import LOADER_PATCHES, announce_at_first_load

        LOADER_PATCHES.revert()
        announce_at_first_load(None)


def is_applied() -> bool:
    if _LOADERS not in sys.modules:  # never applied: importing the patches would import torch
        return False
    from sglang_patch.loaders import LOADER_PATCHES

    return LOADER_PATCHES.is_applied()


_LOADERS = "sglang_patch.loaders"
