"""Emulated NVFP4 linear layers: vLLM's compressed-tensors NVFP4 scheme and ModelOpt linear method, with the
emulation as their kernel.

vLLM loads the layer as always; after loading, each partition (q|k|v,
gate|up) is dequantized with its own per-tensor scale, as its checkpoint
format defines it (``numerics.CheckpointFormat``), and the layer then runs
``emulated_linear``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from scalar_scales.patching import Patch, PatchSet
from vllm_patch.nvfp4_emulation.numerics import (
    COMPRESSED_TENSORS,
    MODELOPT,
    CheckpointFormat,
    dequantize_rows,
    model_dtype,
)
from vllm_patch.nvfp4_emulation.ops import emulated_linear
from vllm_patch.nvfp4_emulation.refusal import emulate_on_refusal
from vllm_patch.targets import LINEAR_SCHEME_MODULE, MODELOPT_MODULE
from vllm_patch.vllm_logging import warn
from vllm_patch.vllm_version import SUPPORTED

__all__ = ["LINEAR_PATCHES", "MODELOPT_LINEAR_PATCHES", "EmulatedNvfp4LinearKernel"]


class EmulatedNvfp4LinearKernel:
    """Stands in for vLLM's NVFP4 linear kernel on the CPU, for one checkpoint format."""

    def __init__(self, use_a16: bool, checkpoint: CheckpointFormat = COMPRESSED_TENSORS):
        self.use_a16 = use_a16
        self.checkpoint = checkpoint

    def input_quant_key(self) -> None:
        """The layer quantizes its own input (vLLM asks so that it does not fuse a quantizer in front)."""
        return

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        """Dequantize each partition with its own per-tensor scale; keep each partition's activation global
        scale (W4A4) as ``input_global_scale``, in the form the fake-quantization takes."""
        checkpoint = self.checkpoint
        widths = list(layer.logical_widths)
        global_scales = list(getattr(layer, checkpoint.global_scale).data)
        packed = getattr(layer, checkpoint.packed).data
        weight = dequantize_rows(packed, layer.weight_scale.data, global_scales, widths, checkpoint.dequantize)
        input_scale = getattr(layer, checkpoint.input_scale, None)
        activation = None if self.use_a16 else checkpoint.activation_global_scale(input_scale.data)
        checkpoint.drop_tensors(layer)
        layer.weight = torch.nn.Parameter(weight.to(model_dtype()), requires_grad=False)
        if activation is not None:
            layer.input_global_scale = torch.nn.Parameter(activation, requires_grad=False)

    def apply_weights(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        scales = torch.empty(0) if self.use_a16 else layer.input_global_scale.data
        out = emulated_linear(x, layer.weight, scales, list(layer.logical_widths), self.use_a16)
        return out if bias is None else out + bias


def _emulated_linear_kernel(checkpoint: CheckpointFormat, use_a16: bool = False) -> EmulatedNvfp4LinearKernel:
    """Instead of ``init_nvfp4_linear_kernel``, whose every ValueError is a refusal (none found, or the one it
    forces is unavailable)."""
    return EmulatedNvfp4LinearKernel(use_a16, checkpoint)


def _wrap_linear_process(process: Callable[..., None]) -> Callable[..., None]:
    """``CompressedTensorsW4A4Fp4.process_weights_after_loading`` and ``ModelOptLinearMethod``'s: emulated layers
    keep per-partition scales.

    Upstream reduces the partitions' per-tensor weight and input scales to
    their maximum for its kernels; the emulation dequantizes and quantizes
    each partition with its own, as compressed-tensors does (and as ModelOpt
    exported them).
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
            emulate_on_refusal(ValueError, functools.partial(_emulated_linear_kernel, COMPRESSED_TENSORS)),
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
    supports=SUPPORTED,
    warn=warn,
)
"""The linear scheme's patches: what the emulation wraps, why, and the parameters it calls each original with."""


MODELOPT_LINEAR_PATCHES = [
    Patch(
        MODELOPT_MODULE,
        "init_nvfp4_linear_kernel",
        emulate_on_refusal(ValueError, functools.partial(_emulated_linear_kernel, MODELOPT)),
        "emulate where vLLM has no NVFP4 kernel (ModelOpt NVFP4 and W4A16_NVFP4 layers)",
        parameters=("use_a16",),
    ),
    Patch(
        f"{MODELOPT_MODULE}.ModelOptLinearMethod",
        "process_weights_after_loading",
        _wrap_linear_process,
        "dequantize each partition with its own weight_scale_2, keep each partition's input_scale",
        parameters=("self", "layer"),
    ),
]
"""The ModelOpt linear method's patches (part of the ModelOpt module's patch set, ``nvfp4_emulation``)."""
