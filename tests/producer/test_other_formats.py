"""3e: formats without NVFP4 global scales come out byte for byte as unpatched."""

from __future__ import annotations

import pytest

from scalar_scales_testkit.producer import quantize_to

OTHER_SCHEMES = ("FP8", "W4A16", "MXFP4")


def folder_bytes(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("scheme", OTHER_SCHEMES)
def test_patch_leaves_other_formats_byte_identical(bf16_dir, tmp_path, scheme):
    legacy = quantize_to(bf16_dir, tmp_path / "unpatched", scheme, patched=False, save_path="output_dir")
    patched = quantize_to(bf16_dir, tmp_path / "patched", scheme, patched=True, save_path="output_dir")
    unpatched_files = folder_bytes(legacy)
    assert "model.safetensors" in unpatched_files
    assert folder_bytes(patched) == unpatched_files
