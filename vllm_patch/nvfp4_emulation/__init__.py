"""NVFP4 on a CPU by emulation: vLLM loads the checkpoint as always, then computes with dequantized weights.

vLLM has no NVFP4 kernel for the CPU: the compressed-tensors NVFP4 linear
scheme and the ModelOpt linear method fail with ``Failed to find a kernel
that can implement the NVFP4 linear layer`` and the MoE methods (both
formats) with ``No NvFp4 MoE backend supports the deployment
configuration``. Where (and only where) vLLM would refuse, on the
CPU platform, the emulation steps in (docs/vllm.md):

- :mod:`.numerics`: weights dequantized as compressed-tensors decompresses
  them (ModelOpt: FP4 × FP8 group scale × ``weight_scale_2``); W4A4
  activations fake-quantized as compressed-tensors does, with the loaded
  ``input_global_scale`` (ModelOpt: ``1 / input_scale``).
- :mod:`.ops`: the emulated computations, as torch custom ops.
- :mod:`.refusal`: vLLM's kernel choice, where it refuses on the CPU.
- :mod:`.linear` and :mod:`.moe`: the linear scheme and the MoE method, each
  with its patch set; ModelOpt's linear and MoE methods, one module, one
  patch set.

The plugin imports this package only on the CPU platform, once vLLM imports
the NVFP4 code it patches: importing it registers the custom ops.
"""

from scalar_scales.patching import PatchSet
from vllm_patch.nvfp4_emulation.linear import LINEAR_PATCHES, MODELOPT_LINEAR_PATCHES, EmulatedNvfp4LinearKernel
from vllm_patch.nvfp4_emulation.moe import MODELOPT_MOE_PATCHES, MOE_PATCHES, EmulatedMoE, is_emulated
from vllm_patch.nvfp4_emulation.numerics import (
    dequantize_modelopt_nvfp4,
    dequantize_nvfp4,
    fake_quantize_nvfp4_activation,
)
from vllm_patch.targets import LINEAR_SCHEME_MODULE, MODELOPT_MODULE, MOE_METHOD_MODULE
from vllm_patch.vllm_logging import warn
from vllm_patch.vllm_version import MODELOPT_SUPPORTED

__all__ = [
    "EMULATION_PATCHES",
    "EmulatedMoE",
    "EmulatedNvfp4LinearKernel",
    "dequantize_modelopt_nvfp4",
    "dequantize_nvfp4",
    "fake_quantize_nvfp4_activation",
    "is_emulated",
]

MODELOPT_PATCHES = PatchSet(
    "vllm_patch.nvfp4_emulation (ModelOpt)",
    [*MODELOPT_LINEAR_PATCHES, *MODELOPT_MOE_PATCHES],
    supports=MODELOPT_SUPPORTED,
    warn=warn,
)
"""ModelOpt's linear and NVFP4 MoE methods live in one vLLM module, so their patches go in together."""
EMULATION_PATCHES = {
    LINEAR_SCHEME_MODULE: LINEAR_PATCHES,
    MOE_METHOD_MODULE: MOE_PATCHES,
    MODELOPT_MODULE: MODELOPT_PATCHES,
}
"""Per vLLM module (patched once that module is imported): the emulation's patch set."""
