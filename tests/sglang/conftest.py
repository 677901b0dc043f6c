"""Fixtures for loading the round trip's DeepSeek-V3 artifacts with SGLang's own model loader (sglang env).

Each load runs in its own process (load_artifact.py), as SGLang's scheduler
loads a model in its own, through ``get_model`` on the CPU
(``scalar_scales_testkit.sglang_cpu`` says what the CPU is given). The
artifacts are the DeepSeek-V3 toy's (``scalar_scales_testkit.toys``) as
SGLang serves DeepSeek, ``kv_b_proj`` in bf16 (scripts/make_artifacts.py
``--ignore``; scripts/test.sh writes them under toys/deepseek-v3-sglang),
written by compressed-tensors 0.19.0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sglang", reason="SGLang tests run in the sglang environment")

from scalar_scales_testkit.roundtrip import artifacts_root  # noqa: E402
from scalar_scales_testkit.vllm_layers import free_port  # noqa: E402

LOAD = Path(__file__).with_name("load_artifact.py")
TOY = "deepseek-v3-sglang"
PRODUCER = "0.19.0"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.sglang)


@pytest.fixture(scope="session")
def artifact() -> Callable[[str], Path]:
    """``artifact("NVFP4-legacy")``: the DeepSeek-V3 toy's artifact of that name."""
    return lambda name: artifacts_root() / "toys" / TOY / f"ct-{PRODUCER}" / name


@pytest.fixture(scope="session")
def load() -> Callable[..., dict[str, Any]]:
    """``load(path, plugins=False, env={})``: what SGLang did with the artifact, as load_artifact.py prints it,
    and its log as ``log``."""

    def run(path: Path, plugins: bool = False, env: dict[str, str] | None = None) -> dict[str, Any]:
        command = [sys.executable, str(LOAD), str(path), str(free_port()), *(["--plugins"] if plugins else [])]
        environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=environment)
        lines = done.stdout.strip().splitlines()
        assert done.returncode == 0 and lines, done.stderr[-3000:]
        return {**json.loads(lines[-1]), "log": done.stderr}

    return run


@pytest.fixture
def copied(tmp_path: Path) -> Callable[[Path], Path]:
    """A copy of an artifact, to change."""
    return lambda path: Path(shutil.copytree(path, tmp_path / path.name))
