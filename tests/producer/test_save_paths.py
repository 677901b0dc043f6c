"""3a: every save path writes 0-D float32 global scales and changes nothing else."""

from __future__ import annotations

import pytest

from scalar_scales.nvfp4 import is_global_scale
from scalar_scales_testkit.checkpoints import global_scale_shapes, tensor_bytes, tensor_entries
from scalar_scales_testkit.producer import SAVE_PATH_CASES as CASES

EXPECTED_GLOBAL_SCALES = {"NVFP4": 112, "NVFP4A16": 56}


@pytest.mark.parametrize(("scheme", "save_path"), CASES)
def test_patched_save_writes_every_global_scale_as_0d_float32(artifact, scheme, save_path):
    entries = tensor_entries(artifact(scheme, patched=True, save_path=save_path))
    scales = {name: e for name, e in entries.items() if is_global_scale(name)}
    assert len(scales) >= EXPECTED_GLOBAL_SCALES[scheme]
    assert {(e.shape, e.dtype) for e in scales.values()} == {((), "F32")}


@pytest.mark.parametrize(("scheme", "save_path"), CASES)
def test_unpatched_save_writes_legacy_shape_1_global_scales(artifact, scheme, save_path):
    assert global_scale_shapes(artifact(scheme, patched=False, save_path=save_path)) == {(1,)}


@pytest.mark.parametrize(("scheme", "save_path"), CASES)
def test_patched_global_scale_values_are_bit_identical_to_legacy(artifact, scheme, save_path):
    legacy = tensor_bytes(artifact(scheme, patched=False, save_path=save_path))
    scalar = tensor_bytes(artifact(scheme, patched=True, save_path=save_path))
    names = [name for name in legacy if is_global_scale(name)]
    assert names
    assert {name: scalar[name] for name in names} == {name: legacy[name] for name in names}


@pytest.mark.parametrize(("scheme", "save_path"), CASES)
def test_patched_save_leaves_every_other_tensor_byte_identical(artifact, scheme, save_path):
    legacy_entries = tensor_entries(artifact(scheme, patched=False, save_path=save_path))
    scalar_entries = tensor_entries(artifact(scheme, patched=True, save_path=save_path))
    assert scalar_entries.keys() == legacy_entries.keys()
    others = [name for name in legacy_entries if not is_global_scale(name)]
    assert {n: (scalar_entries[n].dtype, scalar_entries[n].shape) for n in others} == {
        n: (legacy_entries[n].dtype, legacy_entries[n].shape) for n in others
    }
    legacy = tensor_bytes(artifact(scheme, patched=False, save_path=save_path))
    scalar = tensor_bytes(artifact(scheme, patched=True, save_path=save_path))
    assert [n for n in others if scalar[n] != legacy[n]] == []
