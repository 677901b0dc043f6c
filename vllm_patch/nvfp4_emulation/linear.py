"""Emulated NVFP4 linear layers: vLLM's compressed-tensors NVFP4 scheme with the emulation as its kernel.

vLLM loads the layer as always; after loading, each partition (q|k|v,
gate|up) is dequantized with its own global scale, as compressed-tensors
decompresses it, and the layer then runs ``emulated_linear``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from scalar_scales.patching import Patch, PatchSet
from vllm_patch.nvfp4_emulation.numerics import dequantize_rows, model_dtype
from vllm_patch.nvfp4_emulation.ops import emulated_linear
from vllm_patch.nvfp4_emulation.refusal import emulate_on_refusal
from vllm_patch.targets import LINEAR_SCHEME_MODULE
from vllm_patch.vllm_version import vllm_version

__all__ = ["LINEAR_PATCHES", "EmulatedNvfp4LinearKernel"]


class EmulatedNvfp4LinearKernel:
    """Stands in for vLLM's NVFP4 linear kernel on the CPU."""

    def __init__(self, use_a16: bool):
        self.use_a16 = use_a16

    def input_quant_key(self) -> None:
        """The layer quantizes its own input (vLLM asks so that it does not fuse a quantizer in front)."""
        return None

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        widths = list(layer.logical_widths)
        global_scales = list(layer.weight_global_scale.data)
        weight = dequantize_rows(layer.weight_packed.data, layer.weight_scale.data, global_scales, widths)
        for name in ("weight_packed", "weight_scale", "weight_global_scale"):
            delattr(layer, name)
        layer.weight = torch.nn.Parameter(weight.to(model_dtype()), requires_grad=False)

    def apply_weights(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        scales = torch.empty(0) if self.use_a16 else layer.input_global_scale.data
        out = emulated_linear(x, layer.weight, scales, list(layer.logical_widths), self.use_a16)
        return out if bias is None else out + bias


def _emulated_linear_kernel(use_a16: bool = False) -> EmulatedNvfp4LinearKernel:
    """Instead of ``init_nvfp4_linear_kernel``, whose every ValueError is a refusal (none found, or the one it
    forces is unavailable)."""
    return EmulatedNvfp4LinearKernel(use_a16)


def _wrap_linear_process(process: Callable[..., None]) -> Callable[..., None]:
    """``CompressedTensorsW4A4Fp4.process_weights_after_loading``: emulated layers keep per-partition scales.

    Upstream reduces the partitions' global scales to their maximum for its
    kernels; the emulation dequantizes each partition with its own, as
    compressed-tensors does.
    """

    @functools.wraps(process)
    def wrapper(self: Any, layer: torch.nn.Module) -> None:
        if isinstance(self.kernel, EmulatedNvfp4LinearKernel):
            self.kernel.process_weights_after_loading(layer)
        else:
            process(self, layer)

    return wrapper


LINEAR_PATCHES = PatchSet(
    "vllm_patch.nvfp4_emulation (linear)",
    [
        Patch(
            LINEAR_SCHEME_MODULE,
            "init_nvfp4_linear_kernel",
            emulate_on_refusal(ValueError, _emulated_linear_kernel),
            "emulate where vLLM has no NVFP4 kernel",
            parameters=("use_a16",),
        ),
        Patch(
            f"{LINEAR_SCHEME_MODULE}.CompressedTensorsW4A4Fp4",
            "process_weights_after_loading",
            _wrap_linear_process,
            "dequantize each partition with its own global scale",
            parameters=("self", "layer"),
        ),
    ],
    check=lambda: f"vLLM {vllm_version()}",
)
"""The linear scheme's patches: what the emulation wraps, why, and the parameters it calls each original with."""
