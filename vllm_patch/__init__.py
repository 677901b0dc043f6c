"""Consumer-side fix: a vLLM general plugin that loads (1,) and 0-D per-tensor scales alike.

Installed as the entry point ``vllm.general_plugins: scalar_scales``: install
this package in the environment vLLM runs in (docs/vllm.md says how, until
it is on the package registry), and vLLM calls :func:`register` in every
process it starts (front end, engine core, each worker). It patches the
installed vLLM's MoE loader (``FusedMoE`` up to 0.23, ``RoutedExperts`` from
0.24) so that every per-tensor scale path puts a single-element tensor into a
0-D slot as 0-D, and a scale with more than one value fails with an error
that names the weight, the expert and the shard. Where the installed vLLM
already coerces a path (``_to_scalar``), that coercion stays upstream's: the
wrapper there only names a scale with more than one value. Turn it off with
``VLLM_PLUGINS`` set to a list without ``scalar_scales``.

On the CPU platform, where vLLM has no NVFP4 kernel and would refuse a
compressed-tensors NVFP4 checkpoint, it also emulates NVFP4
(:mod:`vllm_patch.nvfp4_emulation`; ``SCALAR_SCALES_NVFP4_EMULATION=0``
turns that off). The emulation is imported, and its patches installed, on
the CPU platform only (:mod:`vllm_patch.plugin`).
"""

from vllm_patch.plugin import ENTRY_POINT, apply, apply_emulation, is_applied, register, revert
from vllm_patch.scalar import ScaleShapeError, to_scalar
from vllm_patch.targets import LOADER_MODULES

__all__ = [
    "ENTRY_POINT",
    "LOADER_MODULES",
    "ScaleShapeError",
    "apply",
    "apply_emulation",
    "is_applied",
    "register",
    "revert",
    "to_scalar",
]
