"""Tests of a compressed-tensors release built with upstream/compressed-tensors.patch, without the runtime patch.

scripts/verify_upstream_patch.sh runs them with the patched build first on
the path; anywhere else (a released compressed-tensors) they are skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("llmcompressor", reason="runs in a producer environment")

from compressed_tensors_patch.versions import native_support

if native_support() is None:
    pytest.skip(
        "needs compressed-tensors built with upstream/compressed-tensors.patch (scripts/verify_upstream_patch.sh)",
        allow_module_level=True,
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.upstream)


@pytest.fixture(scope="session")
def runtime_saves() -> Path:
    """Artifacts of every save path written with the runtime patch on the released package (scripts/save_paths.py)."""
    path = os.environ.get("SCALAR_SCALES_RUNTIME_SAVES")
    if not path:
        pytest.fail("SCALAR_SCALES_RUNTIME_SAVES is not set: run scripts/verify_upstream_patch.sh")
    return Path(path)
