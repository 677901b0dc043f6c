"""NVFP4's arithmetic as compressed-tensors does it: weights dequantized, activations fake-quantized.

ModelOpt's checkpoints hold the same FP4 values and FP8 group scales; their
per-tensor scales are the reciprocals of compressed-tensors' (a multiplier
``weight_scale_2``, and an ``input_scale`` whose reciprocal is the global
scale the activation fake-quantization takes, as vLLM's own kernels use it).

Dequantization is compressed-tensors' own, from the release installed next
to vLLM. The activation fake-quantization restates its arithmetic operation
for operation, and a differential test holds it to compressed-tensors bit
for bit (tests/vllm_layers/test_emulation.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from scalar_scales.nvfp4 import (
    COMPRESSED_TENSORS_LAYOUT,
    FP4_E2M1_MAX,
    FP8_E4M3_MAX,
    GROUP_SIZE,
    MODELOPT_LAYOUT,
    ProducerLayout,
)

__all__ = [
    "COMPRESSED_TENSORS",
    "MODELOPT",
    "CheckpointFormat",
    "dequantize_modelopt_nvfp4",
    "dequantize_nvfp4",
    "dequantize_rows",
    "fake_quantize_nvfp4_activation",
    "model_dtype",
]

_FP8_SCALE_EPS = 0.125
"""What compressed-tensors puts in place of a zero FP8 group scale (``_get_dtype_eps``)."""


def dequantize_nvfp4(packed: torch.Tensor, scale: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """One weight, as compressed-tensors decompresses it: bf16 FP4 values × bf16 group scale ÷ (1,) global scale."""
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    rows, half = packed.shape
    values = unpack_fp4_from_uint8(packed, rows, half * 2)
    return dequantize(
        x_q=values,
        scale=scale.to(values.dtype),
        global_scale=global_scale.reshape(1).to(torch.float32),
        dtype=values.dtype,
    )


def dequantize_modelopt_nvfp4(packed: torch.Tensor, scale: torch.Tensor, weight_scale_2: torch.Tensor) -> torch.Tensor:
    """One weight, as ModelOpt defines it: FP4 values × FP8 group scale × ``weight_scale_2``, in float32.

    ModelOpt's per-tensor ``weight_scale_2`` (amax / (6 · 448)) multiplies;
    compressed-tensors stores its reciprocal and divides. The packing (two
    e2m1 codes a byte, the low nibble first) is the same, as vLLM's kernels
    take both formats alike.
    """
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8

    rows, half = packed.shape
    values = unpack_fp4_from_uint8(packed, rows, half * 2).to(torch.float32)
    groups = values.unflatten(-1, (-1, GROUP_SIZE))
    step = scale.to(torch.float32) * weight_scale_2.reshape(()).to(torch.float32)
    return (groups * step[..., None]).flatten(-2)


def dequantize_rows(
    packed: torch.Tensor,
    scale: torch.Tensor,
    global_scales: list[torch.Tensor],
    widths: list[int],
    dequantize: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] = dequantize_nvfp4,
) -> torch.Tensor:
    """Dequantize a weight made of stacked partitions (q|k|v, gate|up), each with its own global scale
    (``dequantize``: :func:`dequantize_nvfp4` for compressed-tensors, :func:`dequantize_modelopt_nvfp4`)."""
    parts = zip(packed.split(widths), scale.split(widths), global_scales, strict=True)
    return torch.cat([dequantize(p, s, g) for p, s, g in parts])


def fake_quantize_nvfp4_activation(x: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """``x`` quantized to NVFP4 and back, as compressed-tensors does for a W4A4 layer's input.

    ``global_scale`` holds one value, or one per row of ``x`` (rows headed
    for different experts): each row is quantized exactly as it would be
    alone with its own scale, in one call.

    This is compressed-tensors' dynamic NVFP4 activation quantization
    (``compute_dynamic_scales_and_zp`` then ``fake_quantize`` with the NVFP4
    preset's input activations), operation for operation in the same dtypes,
    without its Python-level dispatch, which took most of a W4A4 decode step.
    """
    scales = global_scale.to(torch.float32).reshape(-1)
    row = scales if scales.numel() == 1 else scales[:, None]
    groups = x.unflatten(-1, (-1, GROUP_SIZE))
    local = row * (groups.abs().amax(-1) / FP4_E2M1_MAX)
    scale = local.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    scale = torch.where(scale == 0, _FP8_SCALE_EPS, scale)
    step_scale = (scale / row)[..., None]
    scaled = (groups / step_scale).clamp(-FP4_E2M1_MAX, FP4_E2M1_MAX)
    return (_round_to_fp4(scaled) * step_scale).flatten(-2).to(x.dtype)


def _round_to_fp4(x: torch.Tensor) -> torch.Tensor:
    """The nearest FP4 e2m1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6), ties to the even mantissa, for ``x`` within ±6:
    compressed-tensors' ``cast_to_fp4`` as rounding in the value's spacing (0.5 below 2, 1 below 4, then 2)."""
    magnitude = x.abs()
    spacing = torch.where(magnitude < 2.0, 0.5, torch.where(magnitude < 4.0, 1.0, 2.0))
    return torch.copysign(torch.round(magnitude / spacing) * spacing, x)


def model_dtype() -> torch.dtype:
    """The dtype the model computes in: vLLM processes weights after loading under the model's default dtype.

    Converting the dequantized weights (bf16, as compressed-tensors produces
    them) once here keeps the conversion off every forward pass.
    """
    return torch.get_default_dtype()


@dataclass(frozen=True)
class CheckpointFormat:
    """A producer's NVFP4 layout (:class:`~scalar_scales.nvfp4.ProducerLayout`: a layer's tensor names, an MoE
    layer's after ``w13_`` or ``w2_``, and which way its per-tensor scales go) and how it dequantizes a weight."""

    layout: ProducerLayout
    dequantize: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

    @property
    def packed(self) -> str:
        return self.layout.weight

    @property
    def global_scale(self) -> str:
        return self.layout.weight_global

    @property
    def input_scale(self) -> str:
        return self.layout.input_global

    def drop_tensors(self, layer: torch.nn.Module, prefix: str = "") -> None:
        """Remove the layer's NVFP4 tensors (an MoE layer's: after ``prefix``, ``w13_`` or ``w2_``), those it has,
        once they are dequantized."""
        for leaf in self.layout.leaves:
            if hasattr(layer, prefix + leaf):
                delattr(layer, prefix + leaf)

    def activation_global_scale(self, input_scale: torch.Tensor) -> torch.Tensor:
        """The global scale :func:`fake_quantize_nvfp4_activation` takes, from the loaded input scale.

        For ModelOpt, whose scales multiply, this is ``1 / input_scale``, what
        vLLM's own ModelOpt path computes as ``input_global_scale_inv`` and
        quantizes with; compressed-tensors stores it as is
        (``input_global_scale``).
        """
        scale = input_scale.to(torch.float32)
        return scale if self.layout.divisor else 1.0 / scale


COMPRESSED_TENSORS = CheckpointFormat(COMPRESSED_TENSORS_LAYOUT, dequantize_nvfp4)
MODELOPT = CheckpointFormat(MODELOPT_LAYOUT, dequantize_modelopt_nvfp4)
