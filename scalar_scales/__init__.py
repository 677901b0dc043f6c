"""scalar-scales: fix quantized checkpoints whose per-tensor scales have the wrong shape.

This is the base package: the ``scalar-scales`` command line and the patch
mechanism both patch packages share (docs/architecture.md lists its layers:
``errors``, ``environment``, ``nvfp4``, ``patching``, ``system``, ``files``,
``sources``, ``scan``, ``consumers``, ``doctor``, ``migrate``, ``cli``, ``start``). None of it imports
torch, and the base install has no dependencies (``check hf://`` needs the
``hub`` extra). It imports nothing from ``compressed_tensors_patch`` or
``vllm_patch``: they build on it, never the reverse.

``__version__`` is read from the installed distribution when first asked
for: reading package metadata costs more than the rest of a command's
imports.
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'scalar_scales' has no attribute {name!r}")
    from importlib import metadata

    try:
        return metadata.version("scalar-scales")
    except metadata.PackageNotFoundError:  # running from a source tree
        return "0+unknown"
