"""The plugin on vLLM's real MoE loader paths, one by one: the copy_ paths it fixes and the errors it names.

Whole artifacts through the whole loader: tests/roundtrip/test_vllm.py.
"""

from __future__ import annotations

import pytest
import torch

import vllm_patch
from scalar_scales_testkit.vllm_layers import build_moe_layer, is_routed_experts, load_into_layer


def per_channel_into_a_scalar_slot(layer, value: torch.Tensor) -> None:
    layer._load_per_channel_weight_scale(
        expert_data=layer.w2_weight_global_scale.data[3], shard_dim=1, shard_id="w2", loaded_weight=value, tp_rank=0
    )


def test_copy_path_with_a_1_shaped_value_fails_without_the_plugin(legacy_nvfp4, layer0):
    """The crash from the upstream report, on vLLM's own copy_-based loader."""
    layer = build_moe_layer(legacy_nvfp4, layer0)
    with pytest.raises(RuntimeError, match=r"output with shape \[\] doesn't match the broadcast shape \[1\]"):
        per_channel_into_a_scalar_slot(layer, torch.tensor([7.0]))


def test_copy_path_with_a_1_shaped_value_loads_with_the_plugin(legacy_nvfp4, layer0):
    vllm_patch.apply()
    layer = build_moe_layer(legacy_nvfp4, layer0)
    per_channel_into_a_scalar_slot(layer, torch.tensor([7.0]))
    assert layer.w2_weight_global_scale.data[3].item() == 7.0


def test_load_w2_into_a_scalar_slot_fails_only_for_the_1_shape_without_the_plugin(legacy_nvfp4, layer0):
    layer = build_moe_layer(legacy_nvfp4, layer0)
    slot = layer.w2_weight_global_scale.data[3]
    layer._load_w2(expert_data=slot, shard_dim=1, loaded_weight=torch.tensor(5.0), tp_rank=0)
    assert slot.item() == 5.0
    with pytest.raises(IndexError):
        layer._load_w2(expert_data=slot, shard_dim=1, loaded_weight=torch.tensor([7.0]), tp_rank=0)
    vllm_patch.apply()
    layer._load_w2(expert_data=slot, shard_dim=1, loaded_weight=torch.tensor([7.0]), tp_rank=0)
    assert slot.item() == 7.0


def test_a_scale_with_two_values_fails_naming_weight_expert_and_shard(legacy_nvfp4, layer0):
    vllm_patch.apply()
    layer = build_moe_layer(legacy_nvfp4, layer0)
    layer.w2_weight_global_scale.data.copy_(torch.arange(8.0))  # the layer is built with torch.empty: maybe NaN
    before = layer.w2_weight_global_scale.data.clone()
    name = "model.layers.0.mlp.experts.3.down_proj.weight_global_scale"
    with pytest.raises(vllm_patch.ScaleShapeError) as error:
        load_into_layer(layer, [(name, torch.tensor([2.0, 3.0]))])
    message = str(error.value)
    assert "expert 3" in message and "shard w2" in message and "shape (2,)" in message
    assert "w2_weight_global_scale" in message or name in message
    assert torch.equal(layer.w2_weight_global_scale.data, before)


def test_a_scale_with_two_values_is_refused_without_the_plugin_too(legacy_nvfp4, layer0):
    """No silent broadcast upstream either; only the message differs."""
    layer = build_moe_layer(legacy_nvfp4, layer0)
    with pytest.raises(RuntimeError):
        name = "model.layers.0.mlp.experts.3.down_proj.weight_global_scale"
        load_into_layer(layer, [(name, torch.tensor([2.0, 3.0]))])


def test_single_value_loader_leaves_a_size_2_weight_shape_untouched(legacy_nvfp4, layer0):
    """_load_single_value also loads compressed-tensors' size-2 weight_shape: only 0-D slots are coerced."""
    vllm_patch.apply()
    layer = build_moe_layer(legacy_nvfp4, layer0)
    weight_shape = torch.nn.Parameter(torch.zeros(8, 2), requires_grad=False)
    layer._load_single_value(param=weight_shape, loaded_weight=torch.tensor([64.0, 128.0]), expert_id=5)
    assert weight_shape.data[5].tolist() == [64.0, 128.0]
    scalar_slot = torch.nn.Parameter(torch.zeros(8), requires_grad=False)
    layer._load_single_value(param=scalar_slot, loaded_weight=torch.tensor([9.0]), expert_id=5)
    assert scalar_slot.data[5].item() == 9.0


def test_the_installed_generation_is_the_one_this_environment_is_for():
    import vllm

    assert is_routed_experts() == (not vllm.__version__.startswith("0.23"))


@pytest.mark.parametrize("style", ["keyword", "positional"])
def test_copy_paths_take_a_1_shaped_value_called_positionally_or_by_keyword(legacy_nvfp4, layer0, style):
    vllm_patch.apply()
    layer = build_moe_layer(legacy_nvfp4, layer0)
    slot = layer.w2_weight_global_scale.data[3]
    if style == "keyword":
        layer._load_w2(expert_data=slot, shard_dim=1, loaded_weight=torch.tensor([7.0]), tp_rank=0)
        layer._load_per_channel_weight_scale(
            expert_data=slot, shard_dim=1, shard_id="w2", loaded_weight=torch.tensor([8.0]), tp_rank=0
        )
    else:
        layer._load_w2(slot, 1, torch.tensor([7.0]), 0)
        assert slot.item() == 7.0
        layer._load_per_channel_weight_scale(slot, 1, "w2", torch.tensor([8.0]), 0)
    assert slot.item() == 8.0


def test_a_positional_call_with_two_values_names_the_shard(legacy_nvfp4, layer0):
    vllm_patch.apply()
    layer = build_moe_layer(legacy_nvfp4, layer0)
    with pytest.raises(vllm_patch.ScaleShapeError, match="shard w2"):
        layer._load_per_channel_weight_scale(layer.w2_weight_global_scale.data[3], 1, "w2", torch.ones(2), 0)
