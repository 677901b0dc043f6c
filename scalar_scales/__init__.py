"""scalar-scales: fix quantized checkpoints whose per-tensor scales have the wrong shape.

This package holds what the command-line tool needs and nothing heavier: the
safetensors header reader and the checkpoint layout. It never imports torch.
"""

from importlib import metadata

__all__ = ["__version__"]

try:
    __version__ = metadata.version("scalar-scales")
except metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"
