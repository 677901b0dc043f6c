"""Fixtures for the GPU check (scripts/gpu_check.sh): the toy MoE quantized and reloaded on CUDA.

Skipped without CUDA. ``SCALAR_SCALES_GPU_DRY_RUN=1`` runs the same tests on
the CPU, to try the check's logic on a machine without a GPU; its results
say "cpu" and are not GPU results.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("llmcompressor", reason="the GPU check needs llm-compressor (see scripts/gpu_check.sh)")

import torch

from compressed_tensors_patch import toy_moe
from scalar_scales_testkit.producer import quantize_to
from scalar_scales_testkit.roundtrip import installed_versions


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda")
    if os.environ.get("SCALAR_SCALES_GPU_DRY_RUN") == "1":
        return torch.device("cpu")
    pytest.skip("no CUDA device")


@pytest.fixture(scope="session")
def report(device: torch.device) -> Callable[[str, str], None]:
    """``report(check, outcome)``: one row of the GPU table, appended to $SCALAR_SCALES_GPU_RESULTS (a file)."""
    path = os.environ.get("SCALAR_SCALES_GPU_RESULTS")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)"

    def write(check: str, outcome: str) -> None:
        if path:
            row = {"check": check, "outcome": outcome, "device": name, "versions": installed_versions()}
            with open(path, "a") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")

    return write


@pytest.fixture(scope="session")
def bf16_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return toy_moe.build_toy_checkpoint(tmp_path_factory.mktemp("toy") / "bf16")


@pytest.fixture(scope="session")
def quantized(bf16_dir: Path, device: torch.device, tmp_path_factory: pytest.TempPathFactory):
    """``quantized(scheme, patched)``: the toy MoE quantized with ``oneshot`` on ``device``, cached."""
    cache: dict[tuple[str, bool], Path] = {}
    root = tmp_path_factory.mktemp("artifacts")

    def get(scheme: str, patched: bool) -> Path:
        if (scheme, patched) not in cache:
            out = root / f"{scheme}-{'format2' if patched else 'legacy'}"
            cache[scheme, patched] = quantize_to(
                bf16_dir, out, scheme, patched=patched, save_path="output_dir", device=device
            )
        return cache[scheme, patched]

    return get
