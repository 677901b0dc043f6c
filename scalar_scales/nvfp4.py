"""What an NVFP4 checkpoint is, stated once: its format name, marker, tensor names, dtypes and numbers, for
each of the two producers that write NVFP4 checkpoints.

Every package uses these: the command line to check and migrate, the
producer patch to write, the vLLM plugin to emulate, and the test kit.

==========================  ===============================  ===================================
                            compressed-tensors               ModelOpt
==========================  ===============================  ===================================
packed FP4 weight (U8)      ``weight_packed``                ``weight`` (U8; another dtype is an
                                                             unquantized module's weight)
FP8 group scale             ``weight_scale`` (F8_E4M3)       ``weight_scale`` (F8_E4M3)
weight global scale (F32)   ``weight_global_scale``:         ``weight_scale_2``:
                            (6 * 448) / amax, a divisor      amax / (6 * 448), a multiplier
input global scale (F32)    ``input_global_scale``, W4A4     ``input_scale``, W4A4 (the reciprocal)
scale shape                 (1,) legacy, () format 2         ()
==========================  ===============================  ===================================

compressed-tensors' converter (``ModelOptNvfp4Converter``, 0.20.1) maps one
onto the other: ``weight`` to ``weight_packed``, and each ModelOpt scale
``x`` to ``1 / x``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "COMPRESSED_TENSORS",
    "COMPRESSED_TENSORS_LAYOUT",
    "FLOAT32_MAX",
    "FORMAT_VERSION_KEY",
    "FP4_E2M1_MAX",
    "FP8_E4M3_MAX",
    "GLOBAL_SCALE_SUFFIX",
    "GROUP_SIZE",
    "LAYOUTS",
    "LEGACY_FORMAT_VERSION",
    "MODELOPT",
    "MODELOPT_LAYOUT",
    "NVFP4_FORMAT",
    "SCALAR_FORMAT_VERSION",
    "SCALE_NUMERATOR",
    "Producer",
    "ProducerLayout",
    "is_global_scale",
]

Producer = Literal["compressed-tensors", "modelopt"]
COMPRESSED_TENSORS: Producer = "compressed-tensors"
MODELOPT: Producer = "modelopt"

NVFP4_FORMAT = "nvfp4-pack-quantized"
"""compressed-tensors' name for NVFP4 (and NVFP4A16) in ``quantization_config.format``."""
FORMAT_VERSION_KEY = "format_version"
"""This project's marker in ``quantization_config``: 2 means 0-D global scales; absent means legacy (1,)."""
SCALAR_FORMAT_VERSION = 2
LEGACY_FORMAT_VERSION = 1
GLOBAL_SCALE_SUFFIX = "_global_scale"
"""compressed-tensors names a tensor-group quantizer's per-tensor scale ``<base>_global_scale``: NVFP4 has
``weight_global_scale`` and, for calibrated activations, ``input_global_scale``."""

GROUP_SIZE = 16
"""NVFP4's group size: one FP8 scale per 16 FP4 values, unless a config says otherwise."""
FP4_E2M1_MAX = 6.0
FP8_E4M3_MAX = 448.0
SCALE_NUMERATOR = FP4_E2M1_MAX * FP8_E4M3_MAX
"""compressed-tensors stores a global scale as ``(6 * 448) / amax``; ModelOpt stores ``amax / (6 * 448)``."""
FLOAT32_MAX = 3.4028234663852886e38
"""float32's largest finite value. A float32 scale below ``1 / FLOAT32_MAX`` (about 2.9387e-39, a subnormal: the
subnormals below it) has a float32 reciprocal of Inf, as 0 has: engines invert ModelOpt's ``input_scale`` in
float32."""


def is_global_scale(tensor_name: str) -> bool:
    """Whether a tensor (a checkpoint entry, a parameter or a state-dict key) is one of compressed-tensors'
    per-tensor global scales: its name ends with a suffix of :data:`COMPRESSED_TENSORS_LAYOUT`'s
    ``scale_suffixes``.

    The producer patch, the test kit, the benchmarks and the tests of
    compressed-tensors artifacts use it. The command line does not: it asks
    the layout each checkpoint declares (:attr:`ProducerLayout.scale_suffixes`),
    which for compressed-tensors is this same test.
    """
    return tensor_name.endswith(COMPRESSED_TENSORS_LAYOUT.scale_suffixes)


_FLOAT16_MAX = 65504.0


@dataclass(frozen=True)
class ProducerLayout:
    """How one producer writes an NVFP4 module: its tensors' names and dtypes, and which way its global scales
    go (``divisor``: ``(6 * 448) / amax``, compressed-tensors'; else ``amax / (6 * 448)``, ModelOpt's)."""

    producer: Producer
    weight: str
    weight_global: str
    input_global: str
    divisor: bool
    scale_suffixes: tuple[str, ...]
    """The endings of the names of this layout's per-tensor scales."""
    weight_scale: str = "weight_scale"

    @property
    def leaves(self) -> tuple[str, ...]:
        return (self.weight, self.weight_scale, self.weight_global, self.input_global)

    @property
    def weight_named_plainly(self) -> bool:
        """The packed weight has the name an unquantized module's weight has (ModelOpt's ``weight``), so only
        its dtype (U8) tells the two apart."""
        return self.weight == "weight"

    @property
    def dtypes(self) -> dict[str, str]:
        """What the producer writes for each tensor of a module, and what vLLM allocates for it."""
        return {self.weight: "U8", self.weight_scale: "F8_E4M3", self.weight_global: "F32", self.input_global: "F32"}

    def other_convention_bound(self, leaf: str) -> float:
        """Past what bound a positive scale's value makes sense only in the other producer's convention: below it
        where :attr:`other_convention_below`, else above it.

        In compressed-tensors' ``(6 * 448) / amax`` a weight global scale below
        1 means weights of magnitude over 2688, and an input global scale
        below 2688 / 65504 activations over float16's largest value. In
        ModelOpt's ``amax / (6 * 448)`` the same holds the other way round.
        """
        limit = 1.0 if leaf == self.weight_global else SCALE_NUMERATOR / _FLOAT16_MAX
        return limit if self.divisor else 1.0 / limit

    @property
    def other_convention_below(self) -> bool:
        """Whether a value below :meth:`other_convention_bound` is the other convention's (else one above)."""
        return self.divisor


COMPRESSED_TENSORS_LAYOUT = ProducerLayout(
    COMPRESSED_TENSORS,
    "weight_packed",
    "weight_global_scale",
    "input_global_scale",
    divisor=True,
    scale_suffixes=(GLOBAL_SCALE_SUFFIX,),
)
MODELOPT_LAYOUT = ProducerLayout(
    MODELOPT,
    "weight",
    "weight_scale_2",
    "input_scale",
    divisor=False,
    scale_suffixes=(".weight_scale_2", ".input_scale"),
)
LAYOUTS = {layout.producer: layout for layout in (COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT)}
