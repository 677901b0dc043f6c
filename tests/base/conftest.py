"""Fixtures for the command-line tests."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from scalar_scales_testkit.cli import make_checkpoint


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return make_checkpoint(tmp_path / "ckpt")


@pytest.fixture
def sigint_reaches_children() -> Iterator[None]:
    """A command started here gets SIGINT as a terminal's Ctrl-C gives it: a shell that starts the tests in the
    background has them ignore SIGINT, and a command inherits that, so a test that sends it would test nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
