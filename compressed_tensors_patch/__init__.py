"""Producer-side fix: NVFP4 artifacts with 0-D global scales and ``format_version`` 2.

While applied, every llm-compressor / compressed-tensors save path writes
``*.weight_global_scale`` and ``*.input_global_scale`` as 0-D float32 (values
unchanged) and ``config.json`` declares ``quantization_config.format_version
= 2``. In-memory parameters keep shape (1,); loading follows the marker, so
legacy and format-2 artifacts both load and decompress bit-identically.

A model compressed while the patch is applied (for a save, or as the skeleton
of a checkpoint being loaded) gets its global scales back to (1,) just before
its first forward pass decompresses it, so it decompresses exactly as a legacy
checkpoint does, inside the block or after it.

A compressed-tensors that has the same change natively (see
``upstream/compressed-tensors.patch``) is detected, and then ``apply()``
does nothing but say so: the runtime patch retires itself. Either way the
one line it logs goes through loguru, where llm-compressor and
compressed-tensors log, so it shows in an llm-compressor run.

The patch set declares the upstream releases it supports
(``versions.SUPPORTED``); on any other, or where a function it wraps is
missing or takes other parameters than its wrapper calls it with, nothing is
patched.

Overlapping ``applied()`` blocks, in any threads, keep the patch applied
until the last of them exits.

    import compressed_tensors_patch

    with compressed_tensors_patch.applied():
        oneshot(model=model, recipe=recipe, output_dir="out")
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from compressed_tensors_patch.scales import GlobalScaleShapeError
from compressed_tensors_patch.versions import SUPPORTED, native_support
from compressed_tensors_patch.wrappers import (
    wrap_compress,
    wrap_compress_model,
    wrap_config_init,
    wrap_config_to_dict,
    wrap_decompress,
    wrap_from_compression_config,
    wrap_update_config,
)
from scalar_scales.nvfp4 import SCALAR_FORMAT_VERSION
from scalar_scales.patching import Patch, PatchSet, UnsupportedUpstreamError

__all__ = [
    "FORMAT_VERSION",
    "GlobalScaleShapeError",
    "UnsupportedUpstreamError",
    "applied",
    "apply",
    "is_applied",
    "revert",
]

FORMAT_VERSION = SCALAR_FORMAT_VERSION

_NVFP4 = "compressed_tensors.compressors.nvfp4.base.NVFP4PackedCompressor"
_MODEL_COMPRESSOR = "compressed_tensors.compressors.model_compressors.model_compressor.ModelCompressor"
_HF_CONFIG = "transformers.utils.quantization_config.CompressedTensorsConfig"
_BY_SCHEME = ("cls", "state_dict", "scheme")
"""What the NVFP4 compressor's classmethods take, and their wrappers call them with; the other rows' wrappers
pass on whatever they are given."""

_PATCHES = PatchSet(
    "compressed_tensors_patch",
    [
        Patch(_NVFP4, "compress", wrap_compress, "write global scales 0-D", parameters=_BY_SCHEME),
        Patch(
            _NVFP4,
            "decompress",
            wrap_decompress,
            "decompress with (1,) scales: in-memory shape, pinned dtype",
            parameters=_BY_SCHEME,
        ),
        Patch(
            _MODEL_COMPRESSOR,
            "compress_model",
            wrap_compress_model,
            "validate scales; pick layout per compressor; decompress later as legacy, patched or not",
        ),
        Patch(
            _MODEL_COMPRESSOR,
            "from_compression_config",
            wrap_from_compression_config,
            "a loading compressor builds its skeleton in the checkpoint's layout",
            parameters=("cls", "compression_config"),
        ),
        Patch(_MODEL_COMPRESSOR, "update_config", wrap_update_config, "declare format_version from the shards"),
        Patch(_HF_CONFIG, "__init__", wrap_config_init, "keep format_version from config.json"),
        Patch(_HF_CONFIG, "to_dict", wrap_config_to_dict, "write format_version back on re-save", parameters=("self",)),
        Patch(
            "llmcompressor.entrypoints.model_free",
            "update_config",
            wrap_update_config,
            "declare format_version after model_free_ptq",
            requires="llmcompressor",
        ),
    ],
    supports=SUPPORTED,
    warn=lambda message: _warn(f"scalar-scales: {message}"),
)


def apply() -> None:
    """Patch compressed-tensors (and llm-compressor's model-free path) in this process.

    Idempotent. Does nothing, and says so, where compressed-tensors writes
    0-D global scales natively. Raises :class:`UnsupportedUpstreamError`, with
    nothing patched, on a release outside ``versions.SUPPORTED`` or one whose
    functions are not those the patch was written for, saying which.
    """
    native = native_support()
    if native is not None:
        _log(f"scalar-scales: {native} writes 0-D global scales natively; nothing to patch")
        return
    upstream = _PATCHES.apply()
    if upstream is not None:
        _log(f"scalar-scales: compressed_tensors_patch applied to {upstream}: {', '.join(_PATCHES.applied_targets())}")


def revert() -> None:
    """Restore every original function exactly; a no-op when not applied."""
    _PATCHES.revert()


def is_applied() -> bool:
    return _PATCHES.is_applied()


def applied() -> AbstractContextManager[None]:
    """Apply for the duration of a ``with`` block.

    The patch is process-wide: it stays applied until the last open block
    exits, in whichever thread, and for good when ``apply()`` was called
    before. A model loaded inside the block may run after it.
    """
    if native_support() is not None:
        apply()
        return nullcontext()
    return _PATCHES.applied()


def _log(message: str) -> None:
    """One INFO line through loguru, which llm-compressor configures to show (``LLM_COMPRESSOR_LOG_LEVEL``)."""
    from loguru import logger

    logger.opt(depth=1).info(message)


def _warn(message: str) -> None:
    from loguru import logger

    logger.warning(message)
