"""The installed distribution's version, read when first asked for: reading package metadata costs more than the
rest of a command's imports."""

from __future__ import annotations

from functools import cache

__all__ = ["installed_version"]


@cache
def installed_version() -> str:
    """``scalar-scales``' version as installed; ``0+unknown`` where it runs from a source tree, not installed."""
    from importlib import metadata

    try:
        return metadata.version("scalar-scales")
    except metadata.PackageNotFoundError:
        return "0+unknown"
