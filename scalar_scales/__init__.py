"""scalar-scales: fix quantized checkpoints whose per-tensor scales have the wrong shape.

This is the base package: the ``scalar-scales`` command line, the library it
is built on (:func:`check`, :func:`migrate`: :mod:`scalar_scales.api`), and
the patch mechanism both patch packages share (docs/architecture.md lists its
layers). None of it imports torch, and the base install has no dependencies
(``check hf://`` needs the ``hub`` extra). It imports nothing from
``compressed_tensors_patch`` or ``vllm_patch``: they build on it, never the
reverse.

The names below are imported when first asked for, so that ``import
scalar_scales`` (which every module of the package, and each patch package,
runs first) costs nothing; ``__version__`` is read from the installed
distribution then, since reading package metadata costs more than the rest
of a command's imports. The README's "Python API" shows them called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scalar_scales.api import check, migrate
    from scalar_scales.doctor import CheckReport, Finding
    from scalar_scales.errors import CheckpointError
    from scalar_scales.migration import MigrationReport

__all__ = ["CheckReport", "CheckpointError", "Finding", "MigrationReport", "__version__", "check", "migrate"]

_WHERE = {
    "check": "scalar_scales.api",
    "migrate": "scalar_scales.api",
    "CheckReport": "scalar_scales.doctor",
    "Finding": "scalar_scales.doctor",
    "CheckpointError": "scalar_scales.errors",
    "MigrationReport": "scalar_scales.migration",
}


def __getattr__(name: str) -> object:
    if name == "__version__":
        from scalar_scales.version import installed_version

        return installed_version()
    if name not in _WHERE:
        raise AttributeError(f"module 'scalar_scales' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(_WHERE[name]), name)
