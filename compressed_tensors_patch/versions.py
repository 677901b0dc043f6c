"""Which upstream releases the producer patch supports, and whether compressed-tensors needs it at all.

``SUPPORTED`` is the patch set's declaration (``scalar_scales.patching``):
each distribution whose code the patch wraps, and the release series the
tests ran it on (their later patch releases included). Any other release is
refused with nothing patched, unless ``SCALAR_SCALES_ALLOW_UNTESTED_UPSTREAM=1``
asks to try anyway (with one warning). A release inside the declaration is
refused too where a function the patch wraps is missing, or takes other
parameters than its wrapper calls it with (the rows' ``parameters``).
Supporting a new release is one change here, once its environment's tests
pass (README: Following upstream releases).
"""

from __future__ import annotations

from importlib import metadata

from scalar_scales.patching import import_dotted

__all__ = ["SUPPORTED", "native_support"]

SUPPORTED = {
    "compressed-tensors": ">=0.19,<0.21",
    "transformers": ">=5.17,<5.26,!=5.20.*,!=5.21.*,!=5.22.*,!=5.23.*,!=5.24.*",
    "llmcompressor": ">=0.14.0.1,<0.15",
}
"""Tested: compressed-tensors 0.19.0, 0.20.0 and 0.20.1; transformers 5.17.0 (5.19.0, vLLM's environments', has
the two wrapped methods' source unchanged; 5.18 is not tested) and 5.25.0, the newest, in the newest-transformers
environment (its ``CompressedTensorsConfig.__init__`` and ``to_dict`` have 5.17.0's source; its quantizer still
builds the compressor with ``from_compression_config`` and compresses the skeleton with ``compress_model``); 5.20 to
5.24 are not tested, so left out; llmcompressor 0.14.0.1, the producer extra's range. compressed-tensors 0.17.0,
vLLM's pin, is refused (tests/producer/test_api.py)."""

_QUANTIZATION_CONFIG = "compressed_tensors.quantization.quant_config.QuantizationConfig"


def native_support() -> str | None:
    """The installed compressed-tensors, described, if it writes 0-D global scales itself; else None.

    A release with the change (upstream/compressed-tensors.patch) declares
    ``QuantizationConfig.format_version``; there is then nothing to patch,
    so this is checked before the declaration, and such a release needs no
    place in it.
    """
    try:
        version = metadata.version("compressed-tensors")
    except metadata.PackageNotFoundError:
        return None
    config = import_dotted(_QUANTIZATION_CONFIG)
    if config is None or "format_version" not in config.model_fields:
        return None
    return f"compressed-tensors {version}"
