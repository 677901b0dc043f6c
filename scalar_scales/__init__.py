"""scalar-scales: fix quantized checkpoints whose per-tensor scales have the wrong shape.

This is the base package: the ``scalar-scales`` command line (``cli``,
``scan``, ``rules``, ``diagnose``, ``check_report``, ``hub``, ``migrate``,
``header_edit``, ``safetensors_header``, ``checkpoint``, ``config_marker``,
``durable``) and the patch mechanism both patch packages share
(``patching``). None of it imports torch, and the base install has no
dependencies (``check hf://`` needs the ``hub`` extra). It imports nothing from ``compressed_tensors_patch`` or
``vllm_patch``: they build on it, never the reverse (docs/architecture.md).
"""

from importlib import metadata

__all__ = ["__version__"]

try:
    __version__ = metadata.version("scalar-scales")
except metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"
