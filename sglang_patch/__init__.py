"""Consumer-side fix: an SGLang general plugin that loads (1,) and 0-D global scales alike.

Installed as the entry point ``sglang.srt.plugins: scalar_scales``: install
this package where SGLang runs and SGLang calls :func:`register` in every
process it starts. It patches SGLang's model loading (:mod:`sglang_patch.loaders`)
so that a legacy NVFP4 DeepSeek-family checkpoint, whose fused MLA
a-projections SGLang refuses (``AssertionError: param.shape=torch.Size([1])
... loaded_weight.shape=torch.Size([2])``), loads; a format-2 (0-D) one
loads as legacy does; and fused partners whose global scales differ are a
named error, not a silently dropped scale. ``SGLANG_PLUGINS`` set to a list
without ``scalar_scales`` turns it off.
"""

from sglang_patch.declared import SUPPORTED, FusedScalesDifferError
from sglang_patch.plugin import ENTRY_POINT, LOADER_MODULE, apply, is_applied, register, revert

__all__ = [
    "ENTRY_POINT",
    "LOADER_MODULE",
    "SUPPORTED",
    "FusedScalesDifferError",
    "apply",
    "is_applied",
    "register",
    "revert",
]
