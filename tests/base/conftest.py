"""Fixtures for the command-line tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalar_scales_testkit.cli import make_checkpoint


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return make_checkpoint(tmp_path / "ckpt")
