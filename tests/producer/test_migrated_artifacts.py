"""Artifacts migrated by the CLI are interchangeable with those the producer writes natively."""

from __future__ import annotations

import pytest

from compressed_tensors_patch import toy_moe
from scalar_scales_testkit.checkpoints import described, quantization_config, tensor_bytes
from scalar_scales_testkit.producer import differing, load_and_run, migrated_copy


@pytest.mark.parametrize("scheme", toy_moe.SCHEMES)
def test_legacy_migrated_by_the_cli_equals_native_format2(artifact, tmp_path, scheme):
    migrated = migrated_copy(artifact(scheme, patched=False), tmp_path / "migrated")
    native = artifact(scheme, patched=True)
    assert described(migrated) == described(native)
    assert tensor_bytes(migrated) == tensor_bytes(native)
    assert quantization_config(migrated) == quantization_config(native)


@pytest.mark.parametrize("scheme", toy_moe.SCHEMES)
def test_legacy_migrated_by_the_cli_loads_bit_identically_to_native_format2(artifact, tmp_path, prompt_ids, scheme):
    migrated = migrated_copy(artifact(scheme, patched=False), tmp_path / "migrated")
    from_cli, _ = load_and_run(migrated, prompt_ids, patched=True)
    native, _ = load_and_run(artifact(scheme, patched=True), prompt_ids, patched=True)
    assert differing(from_cli, native) == []


@pytest.mark.parametrize("scheme", toy_moe.SCHEMES)
def test_native_format2_migrated_to_legacy_equals_the_legacy_artifact(artifact, tmp_path, scheme):
    migrated = migrated_copy(artifact(scheme, patched=True), tmp_path / "legacy", "--to", "legacy")
    legacy = artifact(scheme, patched=False)
    assert described(migrated) == described(legacy)
    assert tensor_bytes(migrated) == tensor_bytes(legacy)
    assert "format_version" not in quantization_config(migrated)
