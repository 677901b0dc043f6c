"""SGLang 0.5.23 loading NVFP4 DeepSeek-V3 checkpoints, legacy and format 2, without and with the plugin.

SGLang fuses each layer's MLA a-projections (``q_a_proj``,
``kv_a_proj_with_mqa``) into ``fused_qkv_a_proj_with_mqa`` on load, and its
NVFP4 kernel takes one global scale for the fused weight. What it does with
each shape is observed here through its own ``get_model`` (model construction,
``DeepseekV2ForCausalLM.load_weights``, post-processing) on the CPU.
"""

from __future__ import annotations

import pytest
from safetensors.torch import load_file, save_file

LEGACY_FAILURE = (
    "AssertionError: param.shape=torch.Size([1]) param.dtype=torch.float32 "
    "loaded_weight.shape=torch.Size([2]) loaded_weight.dtype=torch.float32"
)
KV_A = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight_global_scale"
Q_A = "model.layers.0.self_attn.q_a_proj.weight_global_scale"
FUSED = "model.layers.0.self_attn.fused_qkv_a_proj_with_mqa.weight_global_scale"


def with_kv_a_scale_doubled(path):
    """The artifact with layer 0's ``kv_a_proj_with_mqa`` weight global scale unlike ``q_a_proj``'s, as a
    producer that does not share fused layers' global scales writes it (llm-compressor shares them)."""
    shard = path / "model.safetensors"
    tensors = load_file(shard)
    tensors[KV_A] = tensors[KV_A] * 2
    save_file(tensors, shard, metadata={"format": "pt"})
    return tensors[Q_A].item(), tensors[KV_A].item()


def test_sglang_refuses_a_legacy_checkpoint_whose_mla_a_projections_are_nvfp4(load, artifact):
    found = load(artifact("NVFP4-legacy"))
    assert not found["loaded"] and found["error"] == LEGACY_FAILURE


def test_sglang_loads_a_format_2_checkpoint(load, artifact):
    assert load(artifact("NVFP4-format2"))["loaded"]


def test_sglang_loads_a_migrated_legacy_checkpoint(load, artifact):
    assert load(artifact("NVFP4-legacy-migrated"))["loaded"]


def test_sglang_keeps_q_a_proj_s_global_scale_and_drops_kv_a_proj_s_without_a_word(load, artifact, copied):
    q_a, kv_a = with_kv_a_scale_doubled(path := copied(artifact("NVFP4-format2")))
    found = load(path)
    assert found["loaded"] and found["fused"][FUSED] == [q_a] != [kv_a]


@pytest.mark.parametrize("name", ["NVFP4-legacy", "NVFP4-format2", "NVFP4-legacy-migrated"])
def test_with_the_plugin_every_shape_loads_with_the_same_fused_scales(load, artifact, name):
    reference = load(artifact("NVFP4-format2"))["fused"]
    found = load(artifact(name), plugins=True)
    assert found["patched"] and found["loaded"] and found["fused"] == reference


@pytest.mark.parametrize("name", ["NVFP4-legacy", "NVFP4-format2"])
def test_with_the_plugin_differing_fused_global_scales_are_a_named_error(load, artifact, copied, name):
    q_a, kv_a = with_kv_a_scale_doubled(path := copied(artifact(name)))
    found = load(path, plugins=True)
    assert not found["loaded"]
    assert found["error"].startswith(
        "FusedScalesDifferError: model.layers.0.self_attn.fused_qkv_a_proj_with_mqa.weight_global_scale: "
        f"SGLang fuses 2 layers here into one, whose NVFP4 kernel takes one global scale, but theirs differ "
        f"({q_a:g}, {kv_a:g})"
    )


def test_the_plugin_is_found_through_sglang_s_entry_point_and_says_so_in_one_line(load, artifact):
    found = load(artifact("NVFP4-format2"), plugins=True)
    lines = [line for line in found["log"].splitlines() if "scalar-scales:" in line]
    assert found["patched"] and len(lines) == 1 and "SGLang 0.5.23: patched" in lines[0]


def test_sglang_plugins_without_ours_switches_it_off(load, artifact):
    found = load(artifact("NVFP4-legacy"), plugins=True, env={"SGLANG_PLUGINS": "another_plugin"})
    assert not found["patched"] and found["error"] == LEGACY_FAILURE
