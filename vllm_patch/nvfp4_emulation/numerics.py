"""NVFP4's arithmetic as compressed-tensors does it: weights dequantized, activations fake-quantized.

Dequantization is compressed-tensors' own, from the release installed next
to vLLM. The activation fake-quantization restates its arithmetic operation
for operation, and a differential test holds it to compressed-tensors bit
for bit (tests/vllm_layers/test_emulation.py).
"""

from __future__ import annotations

import torch

from scalar_scales.nvfp4 import FP4_E2M1_MAX, FP8_E4M3_MAX, GROUP_SIZE

__all__ = ["dequantize_nvfp4", "dequantize_rows", "fake_quantize_nvfp4_activation", "model_dtype"]

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


def dequantize_rows(
    packed: torch.Tensor, scale: torch.Tensor, global_scales: list[torch.Tensor], widths: list[int]
) -> torch.Tensor:
    """Dequantize a weight made of stacked partitions (q|k|v, gate|up), each with its own global scale."""
    parts = zip(packed.split(widths), scale.split(widths), global_scales, strict=True)
    return torch.cat([dequantize_nvfp4(p, s, g) for p, s, g in parts])


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
