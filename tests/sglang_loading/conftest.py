"""Fixtures for loading the round trip's MLA toys with SGLang's own model loader (sglang environment).

Each load runs in its own process (load_artifact.py), as SGLang's scheduler
loads a model in its own, through ``get_model`` on the CPU
(``scalar_scales_testkit.sglang_cpu`` says what the CPU is given). The
artifacts are the DeepSeek-V3 and GLM-4-MoE-Lite toys' (``scalar_scales_testkit.toys``)
as SGLang serves those models, ``kv_b_proj`` in bf16 (scripts/make_artifacts.py
``--ignore``; scripts/test.sh writes them under toys/NAME-sglang), written by
compressed-tensors 0.19.0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("sglang.srt", reason="SGLang tests run in the sglang environment")

from scalar_scales_testkit.roundtrip import Artifact, Result, artifacts_root, installed_versions  # noqa: E402
from scalar_scales_testkit.sglang_cpu import MLA_A_PROJECTIONS, MODELS  # noqa: E402
from scalar_scales_testkit.vllm_layers import free_port  # noqa: E402

LOAD = Path(__file__).with_name("load_artifact.py")
PRODUCER = "0.19.0"
SCHEME = "NVFP4"
FIXES = {False: "none", True: "sglang_patch plugin"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.sglang)


@pytest.fixture(scope="session")
def artifact() -> Callable[[str, str], Path]:
    """``artifact("deepseek-v3", "legacy")``: that toy's NVFP4 artifact of that form."""
    return lambda toy, form: artifacts_root() / "toys" / f"{toy}-sglang" / f"ct-{PRODUCER}" / f"{SCHEME}-{form}"


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


@pytest.fixture(scope="session")
def observed(
    load: Callable[..., dict[str, Any]], artifact: Callable[[str, str], Path]
) -> Callable[..., dict[str, Any]]:
    """``observed("deepseek-v3", "legacy", plugins=False)``: what SGLang did with that artifact, loaded once per
    session and recorded for docs/compatibility.md."""
    cache: dict[tuple[str, str, bool], dict[str, Any]] = {}

    def get(toy: str, form: str, plugins: bool = False) -> dict[str, Any]:
        if (toy, form, plugins) not in cache:
            path = artifact(toy, form)
            cache[toy, form, plugins] = found = load(path, plugins=plugins)
            consumer = f"SGLang {version('sglang')} {MODELS[toy]}"
            error = found["error"].splitlines()[0] if found["error"] else None
            result = Result(consumer, FIXES[plugins], Artifact(PRODUCER, SCHEME, form, path), found["loaded"], error)
            result.details = {"architecture": MODELS[toy], "fused": list(MLA_A_PROJECTIONS)}
            result.record("sglang", versions=installed_versions() | {"sglang": version("sglang")})
        return cache[toy, form, plugins]

    return get


@pytest.fixture
def copied(tmp_path: Path) -> Callable[[Path], Path]:
    """A copy of an artifact, to change."""
    return lambda path: Path(shutil.copytree(path, tmp_path / path.name))
