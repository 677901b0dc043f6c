"""What the SGLang plugin declares and says, without torch: the releases it supports, its logger, SGLang's version
and the error it raises. The plugin's registration imports only this (:mod:`sglang_patch.plugin`), so that
``import sglang_patch`` and its ``register`` cost nothing and do nothing where SGLang or torch is not installed;
the patches themselves (:mod:`sglang_patch.loaders`) import torch once SGLang has imported its loader."""

from __future__ import annotations

import functools
import logging
from importlib import metadata

__all__ = ["LOGGER", "SUPPORTED", "FusedScalesDifferError", "sglang_version"]

SUPPORTED = {"sglang": ">=0.5.23,<0.5.24"}
"""The patch set's declaration (``scalar_scales.patching``): SGLang 0.5.23, the release the patch was written for
and is tested on, and its post-releases. Any other is refused with nothing patched, unless
``SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM=1`` asks to try anyway (with one warning); inside it, a loader function
missing or taking other parameters is refused too. Supporting a new release is one change here."""
LOGGER = logging.getLogger("sglang.scalar_scales")
"""Under ``sglang``: SGLang's logging configuration covers it."""


class FusedScalesDifferError(ValueError):
    """The global scales of layers SGLang fuses into one differ, so no one value is right for the fused layer."""


@functools.cache
def sglang_version() -> str:
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return "unknown"
