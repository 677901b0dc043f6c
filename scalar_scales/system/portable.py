"""Whether this process is asked to take the portable paths where its OS has faster or stricter ones.

Each operation in :mod:`scalar_scales.system` takes its OS's own way where
the OS has it (``flock`` on a folder on POSIX, ``copy_file_range``, ``pwrite``) and the portable way
where it does not. ``SCALAR_SCALES_PORTABLE=1`` asks for the portable way
everywhere: that is how the tests run on Linux what macOS and Windows run.
"""

from __future__ import annotations

from scalar_scales.environment import switch

__all__ = ["portable_forced"]


def portable_forced() -> bool:
    """True where ``SCALAR_SCALES_PORTABLE=1`` asks for the portable paths."""
    return switch("SCALAR_SCALES_PORTABLE")
