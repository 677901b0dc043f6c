"""vLLM's own NVFP4 emulation on the CPU, and why the plugin's emulation is used instead (docs/vllm.md).

Each test records an observation of vLLM's own code. If one fails, vLLM
changed: read docs/vllm.md's reasons again, and use vLLM's emulation where
it now serves.
"""

from __future__ import annotations

import pytest
import torch

from scalar_scales_testkit.roundtrip import checkpoint_tensors
from scalar_scales_testkit.vllm_layers import build_moe_layer, compressed_tensors_fake_quantize
from vllm_patch.nvfp4_emulation.numerics import dequantize_rows
from vllm_patch.nvfp4_emulation.ops import emulated_linear

PROJECTIONS = ("q_proj", "k_proj", "v_proj")


def test_vllms_nvfp4_moe_emulation_refuses_the_cpu(legacy_nvfp4, layer0):
    """``Nvfp4QuantizationEmulationTritonExperts`` is a Triton kernel: vLLM offers it for CUDA-like devices only."""
    from vllm.model_executor.layers.fused_moe.experts.nvfp4_emulation_moe import (
        Nvfp4QuantizationEmulationTritonExperts as Experts,
    )
    from vllm.model_executor.layers.fused_moe.modular_kernel import FusedMoEActivationFormat
    from vllm.model_executor.layers.quantization.utils.quant_utils import kNvfp4Dynamic, kNvfp4Static

    moe = build_moe_layer(legacy_nvfp4, layer0).quant_method.moe
    found = Experts.is_supported_config(Experts, moe, kNvfp4Static, kNvfp4Dynamic, FusedMoEActivationFormat.Standard)
    assert found == (False, "kernel does not support current device cpu")


@pytest.fixture
def vllm_linear_emulation_on_the_cpu(monkeypatch):
    """vLLM's linear emulation made a candidate on the CPU, the way vLLM offers: ``register_linear_kernel`` (0.32
    and later), or, where that takes no NVFP4 kernel (0.23), ``VLLM_USE_NVFP4_CT_EMULATIONS=1``."""
    from vllm.model_executor.kernels import linear
    from vllm.platforms import PlatformEnum

    registered = linear._POSSIBLE_NVFP4_KERNELS.get(PlatformEnum.CPU)
    try:
        linear.register_linear_kernel(linear.EmulationNvFp4LinearKernel, PlatformEnum.CPU, "nvfp4")
    except ValueError:
        monkeypatch.setenv("VLLM_USE_NVFP4_CT_EMULATIONS", "1")
    yield linear
    if registered is None:
        linear._POSSIBLE_NVFP4_KERNELS.pop(PlatformEnum.CPU, None)
    else:
        linear._POSSIBLE_NVFP4_KERNELS[PlatformEnum.CPU] = registered


def test_vllms_nvfp4_linear_emulation_runs_w4a4_layers_on_the_cpu(vllm_linear_emulation_on_the_cpu):
    linear = vllm_linear_emulation_on_the_cpu
    assert type(linear.init_nvfp4_linear_kernel(use_a16=False)) is linear.EmulationNvFp4LinearKernel


def test_vllms_nvfp4_linear_emulation_serves_no_weight_only_layer(vllm_linear_emulation_on_the_cpu):
    """NVFP4A16: vLLM picks only its weight-only kernels (0.32 on), or forces Marlin (0.23): none runs on the CPU.
    Its emulation also quantizes every input with ``input_global_scale_inv``, which a weight-only layer lacks."""
    with pytest.raises(ValueError, match="NVFP4"):
        vllm_linear_emulation_on_the_cpu.init_nvfp4_linear_kernel(use_a16=True)


def test_vllms_nvfp4_linear_emulation_is_not_compressed_tensors_arithmetic_and_ours_is(legacy_nvfp4):
    """q|k|v of the toy's first layer, W4A4, 64 rows of bf16 input. The reference is compressed-tensors' own: its
    activation fake-quantization, then the weights it decompresses. vLLM's emulation dequantizes in float32 with
    the fused layer's largest global scale, and quantizes activations its own way; the result differs."""
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.quantization import preset_name_to_scheme
    from vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils import run_nvfp4_emulations

    prefix = "model.layers.0.self_attn"
    tensors = checkpoint_tensors(legacy_nvfp4, lambda name: name.startswith(f"{prefix}."))
    parts = [{k.rpartition(".")[2]: v for k, v in tensors.items() if f".{p}." in k} for p in PROJECTIONS]
    scheme = preset_name_to_scheme("NVFP4", ["Linear"])
    weight = torch.cat([NVFP4PackedCompressor.decompress(dict(part), scheme)["weight"] for part in parts])
    packed, scale = (torch.cat([part[key] for part in parts]) for key in ("weight_packed", "weight_scale"))
    weight_scales, input_scales = (
        torch.cat([p[key].reshape(1) for p in parts]) for key in ("weight_global_scale", "input_global_scale")
    )
    x = torch.randn(64, packed.shape[1] * 2, generator=torch.Generator().manual_seed(0)).bfloat16()
    reference = torch.nn.functional.linear(compressed_tensors_fake_quantize(x, input_scales[0]), weight)

    widths = [part["weight_packed"].shape[0] for part in parts]
    dequantized = dequantize_rows(packed, scale, list(weight_scales), widths).bfloat16()
    ours = emulated_linear(x, dequantized, input_scales, widths, False)
    vllms = run_nvfp4_emulations(
        x=x,
        input_global_scale=input_scales.max(),
        weight=packed,
        weight_scale_swizzled=scale,
        weight_global_scale=1.0 / weight_scales.max(),
        swizzle=False,
    )
    assert torch.equal(ours, reference)
    assert not torch.equal(vllms, reference)
