"""Real artifacts through vLLM's real MoE weight_loader, with and without the plugin."""

from __future__ import annotations

import pytest
import torch
from vllm_support import build_moe_layer, expert_tensors, is_routed_experts, load_into_layer

import vllm_patch

FORMS = ("legacy", "format2")
SCHEMES = ("NVFP4", "NVFP4A16")
GLOBAL_SCALES = ("weight_global_scale", "input_global_scale")


def expected_param(name: str) -> tuple[str, int, int | None]:
    """(vLLM parameter, expert, row) for a checkpoint global scale such as ...experts.3.up_proj.weight_global_scale."""
    expert, projection, kind = name.rsplit("experts.", 1)[1].split(".")
    if projection == "down_proj":
        return f"w2_{kind}", int(expert), None
    return f"w13_{kind}", int(expert), 0 if projection == "gate_proj" else 1


def assert_every_global_scale_is_the_on_disk_value(layer, weights) -> None:
    assert weights
    for name, on_disk in weights:
        param, expert, row = expected_param(name)
        loaded = getattr(layer, param).data[expert]
        loaded = loaded if row is None else loaded[row]
        assert torch.equal(loaded, on_disk.reshape(())), name


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("plugin", [True, False], ids=["plugin", "no-plugin"])
def test_every_global_scale_loads_its_on_disk_value(artifacts, scheme, form, plugin):
    """The per-tensor path assigns by item (`param[e][i] = t`), which strips (1,): it loads either shape,
    with or without the plugin. This test shows that, on both vLLM generations."""
    if plugin:
        vllm_patch.apply()
    artifact = artifacts / f"{scheme}-{form}"
    for layer_index in (0, 1):
        layer = build_moe_layer(artifact, layer_index)
        weights = list(expert_tensors(artifact, layer_index, GLOBAL_SCALES))
        load_into_layer(layer, weights)
        assert_every_global_scale_is_the_on_disk_value(layer, weights)


def test_the_two_artifacts_hold_the_two_shapes(artifacts):
    legacy = {tuple(t.shape) for _, t in expert_tensors(artifacts / "NVFP4-legacy", 0, GLOBAL_SCALES)}
    scalar = {tuple(t.shape) for _, t in expert_tensors(artifacts / "NVFP4-format2", 0, GLOBAL_SCALES)}
    assert (legacy, scalar) == ({(1,)}, {()})


def per_channel_into_a_scalar_slot(layer, value: torch.Tensor) -> None:
    layer._load_per_channel_weight_scale(
        expert_data=layer.w2_weight_global_scale.data[3], shard_dim=1, shard_id="w2", loaded_weight=value, tp_rank=0
    )


def test_copy_path_with_a_1_shaped_value_fails_without_the_plugin(artifacts):
    """The crash from the upstream report, on vLLM's own copy_-based loader."""
    layer = build_moe_layer(artifacts / "NVFP4-legacy", 0)
    with pytest.raises(RuntimeError, match=r"output with shape \[\] doesn't match the broadcast shape \[1\]"):
        per_channel_into_a_scalar_slot(layer, torch.tensor([7.0]))


def test_copy_path_with_a_1_shaped_value_loads_with_the_plugin(artifacts):
    vllm_patch.apply()
    layer = build_moe_layer(artifacts / "NVFP4-legacy", 0)
    per_channel_into_a_scalar_slot(layer, torch.tensor([7.0]))
    assert layer.w2_weight_global_scale.data[3].item() == 7.0


def test_load_w2_into_a_scalar_slot_fails_only_for_the_1_shape_without_the_plugin(artifacts):
    layer = build_moe_layer(artifacts / "NVFP4-legacy", 0)
    slot = layer.w2_weight_global_scale.data[3]
    layer._load_w2(expert_data=slot, shard_dim=1, loaded_weight=torch.tensor(5.0), tp_rank=0)
    assert slot.item() == 5.0
    with pytest.raises(IndexError):
        layer._load_w2(expert_data=slot, shard_dim=1, loaded_weight=torch.tensor([7.0]), tp_rank=0)
    vllm_patch.apply()
    layer._load_w2(expert_data=slot, shard_dim=1, loaded_weight=torch.tensor([7.0]), tp_rank=0)
    assert slot.item() == 7.0


def test_a_scale_with_two_values_fails_naming_weight_expert_and_shard(artifacts):
    vllm_patch.apply()
    layer = build_moe_layer(artifacts / "NVFP4-legacy", 0)
    before = layer.w2_weight_global_scale.data.clone()
    name = "model.layers.0.mlp.experts.3.down_proj.weight_global_scale"
    with pytest.raises(vllm_patch.ScaleShapeError) as error:
        load_into_layer(layer, [(name, torch.tensor([2.0, 3.0]))])
    message = str(error.value)
    assert "expert 3" in message and "shard w2" in message and "shape (2,)" in message
    assert "w2_weight_global_scale" in message or name in message
    assert torch.equal(layer.w2_weight_global_scale.data, before)


def test_a_scale_with_two_values_is_refused_without_the_plugin_too(artifacts):
    """No silent broadcast upstream either; only the message differs."""
    layer = build_moe_layer(artifacts / "NVFP4-legacy", 0)
    with pytest.raises(RuntimeError):
        name = "model.layers.0.mlp.experts.3.down_proj.weight_global_scale"
        load_into_layer(layer, [(name, torch.tensor([2.0, 3.0]))])


def test_single_value_loader_leaves_a_size_2_weight_shape_untouched(artifacts):
    """_load_single_value also loads compressed-tensors' size-2 weight_shape: only 0-D slots are coerced."""
    vllm_patch.apply()
    layer = build_moe_layer(artifacts / "NVFP4-legacy", 0)
    weight_shape = torch.nn.Parameter(torch.zeros(8, 2), requires_grad=False)
    layer._load_single_value(param=weight_shape, loaded_weight=torch.tensor([64.0, 128.0]), expert_id=5)
    assert weight_shape.data[5].tolist() == [64.0, 128.0]
    scalar_slot = torch.nn.Parameter(torch.zeros(8), requires_grad=False)
    layer._load_single_value(param=scalar_slot, loaded_weight=torch.tensor([9.0]), expert_id=5)
    assert scalar_slot.data[5].item() == 9.0


def test_the_installed_generation_is_the_one_this_environment_is_for():
    import vllm

    assert is_routed_experts() == (not vllm.__version__.startswith("0.23"))
