"""What an NVFP4 checkpoint is, stated once: its format name, marker, tensor names, dtypes and numbers.

Every package uses these: the command line to check and migrate, the
producer patch to write, the vLLM plugin to emulate, and the test kit.
"""

from __future__ import annotations

__all__ = [
    "FORMAT_VERSION_KEY",
    "FP4_E2M1_MAX",
    "FP8_E4M3_MAX",
    "GLOBAL_SCALE_SUFFIX",
    "GROUP_SIZE",
    "LEGACY_FORMAT_VERSION",
    "NVFP4_FORMAT",
    "SCALAR_FORMAT_VERSION",
    "SCALE_NUMERATOR",
    "TENSOR_DTYPES",
    "is_global_scale",
]

NVFP4_FORMAT = "nvfp4-pack-quantized"
"""compressed-tensors' name for NVFP4 (and NVFP4A16) in ``quantization_config.format``."""
FORMAT_VERSION_KEY = "format_version"
"""This project's marker in ``quantization_config``: 2 means 0-D global scales; absent means legacy (1,)."""
SCALAR_FORMAT_VERSION = 2
LEGACY_FORMAT_VERSION = 1
GLOBAL_SCALE_SUFFIX = "_global_scale"
"""compressed-tensors names a tensor-group quantizer's per-tensor scale ``<base>_global_scale``: NVFP4 has
``weight_global_scale`` and, for calibrated activations, ``input_global_scale``."""

TENSOR_DTYPES: dict[str, str] = {
    "weight_packed": "U8",
    "weight_scale": "F8_E4M3",
    "weight_global_scale": "F32",
    "input_global_scale": "F32",
}
"""What compressed-tensors writes for each NVFP4 tensor of a module, and what vLLM allocates for it."""

GROUP_SIZE = 16
"""NVFP4's group size: one FP8 scale per 16 FP4 values, unless a config says otherwise."""
FP4_E2M1_MAX = 6.0
FP8_E4M3_MAX = 448.0
SCALE_NUMERATOR = FP4_E2M1_MAX * FP8_E4M3_MAX
"""compressed-tensors stores a global scale as ``(6 * 448) / amax``; ModelOpt stores ``amax / (6 * 448)``."""


def is_global_scale(tensor_name: str) -> bool:
    """Whether a tensor (a checkpoint entry, a parameter or a state-dict key) is a per-tensor global scale.

    The one definition every package uses: the command line, the producer
    patch and the test kit.
    """
    return tensor_name.endswith(GLOBAL_SCALE_SUFFIX)
