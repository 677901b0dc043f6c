"""3b: config.json declares format_version 2; unpatched stacks accept it; a re-save keeps it."""

from __future__ import annotations

import json

import pytest
from compressed_tensors.quantization import QuantizationConfig
from test_save_paths import CASES
from transformers import AutoConfig
from transformers.utils.quantization_config import CompressedTensorsConfig

import compressed_tensors_patch
from scalar_scales_testkit.checkpoints import global_scale_shapes, quantization_config
from scalar_scales_testkit.producer import REFUSES_0D_UNPATCHED, load_reference, refuses_0d_unpatched


@pytest.mark.parametrize(("scheme", "save_path"), CASES)
def test_patched_artifact_declares_format_version_2(artifact, scheme, save_path):
    assert quantization_config(artifact(scheme, patched=True, save_path=save_path))["format_version"] == 2


@pytest.mark.parametrize(("scheme", "save_path"), CASES)
def test_legacy_artifact_has_no_format_version_key(artifact, scheme, save_path):
    assert "format_version" not in quantization_config(artifact(scheme, patched=False, save_path=save_path))


def test_marker_is_the_only_config_difference(artifact):
    legacy = json.loads((artifact("NVFP4", patched=False) / "config.json").read_text())
    scalar = json.loads((artifact("NVFP4", patched=True) / "config.json").read_text())
    del scalar["quantization_config"]["format_version"]
    assert scalar == legacy


def test_unpatched_quantization_config_accepts_the_key(artifact):
    document = quantization_config(artifact("NVFP4", patched=True))
    config = QuantizationConfig.model_validate(document)
    assert config.format == "nvfp4-pack-quantized"


def test_unpatched_transformers_config_accepts_the_key(artifact):
    path = artifact("NVFP4", patched=True)
    config = AutoConfig.from_pretrained(path)
    hf_quant = CompressedTensorsConfig.from_dict(config.quantization_config)
    assert hf_quant.is_quantization_compressed


@pytest.mark.skipif(refuses_0d_unpatched(), reason=REFUSES_0D_UNPATCHED)
def test_unpatched_transformers_drops_the_key_on_resave(artifact, tmp_path):
    """Upstream behaviour that the patch exists to change: the marker is lost, the 0-D scales stay."""
    model = load_reference(artifact("NVFP4", patched=True))
    model.save_pretrained(tmp_path)
    assert "format_version" not in quantization_config(tmp_path)
    assert global_scale_shapes(tmp_path) == {()}


def test_marker_survives_transformers_load_and_save_pretrained_while_patched(artifact, tmp_path):
    source = artifact("NVFP4", patched=True)
    with compressed_tensors_patch.applied():
        model = load_reference(source)
        model.save_pretrained(tmp_path)
    assert quantization_config(tmp_path)["format_version"] == 2
    assert global_scale_shapes(tmp_path) == {()}


def test_resaved_legacy_artifact_stays_legacy_while_patched(artifact, tmp_path):
    """A loaded legacy checkpoint keeps its (1,) layout in memory, so it is written and declared legacy."""
    with compressed_tensors_patch.applied():
        model = load_reference(artifact("NVFP4", patched=False))
        model.save_pretrained(tmp_path)
    assert "format_version" not in quantization_config(tmp_path)
    assert global_scale_shapes(tmp_path) == {(1,)}


def test_hf_config_round_trips_format_version_while_patched(artifact):
    document = quantization_config(artifact("NVFP4", patched=True))
    with compressed_tensors_patch.applied():
        assert CompressedTensorsConfig.from_dict(document).to_dict()["format_version"] == 2
    assert "format_version" not in CompressedTensorsConfig.from_dict(document).to_dict()
