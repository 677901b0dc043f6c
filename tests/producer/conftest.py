"""Fixtures that quantize the toy MoE with real llm-compressor, once per session.

Artifacts are built on first request and cached by (scheme, patched, save
path). Two quantizations of the same bf16 checkpoint with the same data are
deterministic on the CPU, which the tests rely on (and check, through the
byte-identity assertions).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("llmcompressor", reason="producer tests run in the producer environments")

import compressed_tensors_patch  # noqa: E402
from compressed_tensors_patch import toy_moe  # noqa: E402
from scalar_scales_testkit.producer import quantize_to  # noqa: E402

Quantize = Callable[..., Path]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.producer)


@pytest.fixture(autouse=True)
def _unpatched_between_tests():
    """Every test starts and ends with compressed-tensors unpatched."""
    compressed_tensors_patch.revert()
    yield
    compressed_tensors_patch.revert()


@pytest.fixture(scope="session")
def bf16_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return toy_moe.build_toy_checkpoint(tmp_path_factory.mktemp("toy") / "bf16")


@pytest.fixture(scope="session")
def artifact(bf16_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Quantize:
    """``artifact(scheme, patched=..., save_path=...)``: a cached quantized checkpoint folder."""
    cache: dict[tuple[str, bool, str], Path] = {}
    root = tmp_path_factory.mktemp("artifacts")

    def get(scheme: str, *, patched: bool, save_path: str = "save_pretrained") -> Path:
        key = (scheme, patched, save_path)
        if key not in cache:
            out = root / f"{scheme}-{'format2' if patched else 'legacy'}-{save_path}"
            was_applied = compressed_tensors_patch.is_applied()
            compressed_tensors_patch.revert()
            try:
                cache[key] = quantize_to(bf16_dir, out, scheme, patched=patched, save_path=save_path)
            finally:
                if was_applied:
                    compressed_tensors_patch.apply()
        return cache[key]

    return get
