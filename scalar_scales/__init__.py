"""scalar-scales: fix quantized checkpoints whose per-tensor scales have the wrong shape.

The command line (``cli``, ``scan``, ``migrate``, ``header_edit``,
``safetensors_header``, ``checkpoint``) never imports torch and the base
install has no dependencies. ``toy_moe`` and ``demo`` need the producer extra;
they are imported only by ``scalar-scales demo``, the tests and benchmarks.
"""

from importlib import metadata

__all__ = ["__version__"]

try:
    __version__ = metadata.version("scalar-scales")
except metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"
