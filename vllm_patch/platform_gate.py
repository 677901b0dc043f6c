"""Where the NVFP4 emulation applies: vLLM's CPU platform, unless ``SCALAR_SCALES_NVFP4_EMULATION=0``."""

from __future__ import annotations

from typing import Any

from scalar_scales.environment import switch

__all__ = ["EMULATION_SWITCH", "current_platform", "should_emulate"]

EMULATION_SWITCH = "SCALAR_SCALES_NVFP4_EMULATION"


def should_emulate(platform: Any) -> bool:
    """Whether to emulate where vLLM refuses NVFP4: on the CPU platform only, and unless switched off."""
    return platform.is_cpu() and switch(EMULATION_SWITCH)


def current_platform() -> Any:
    from vllm.platforms import current_platform

    return current_platform
