"""How each vLLM reads a declaration that contradicts itself: ModelOpt's ``quant_algo: NVFP4`` (W4A4) over config
groups that all say ``input_activations: null`` (weight-only), as vLLM #54189's checkpoint does (NV608), and NVFP4
declared with groups of another size than 16 (NV609), or of format ``nvfp4-pack-quantized`` with weights' arguments
that are not NVFP4's (NV613); and a BF16 router that a ModelOpt declaration does not exclude (NV611).

The checkpoints are NVIDIA's own export of the toy (nvidia-modelopt 0.47) and the toy's ``oneshot`` artifact, broken
as the broken corpus breaks them (the rules' examples). vLLM builds the last layer's experts from each, as its
``get_quant_config`` reads config.json, and loads them through its weight loader.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import vllm

from scalar_scales.doctor import RULES
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT
from scalar_scales_testkit import vllm_layers
from scalar_scales_testkit.broken import CORPUS, MODELOPT_CORPUS
from scalar_scales_testkit.modelopt_exports import copy_of_export
from scalar_scales_testkit.roundtrip import checkpoint_tensors

LAYER = "model.layers.1.mlp.experts"
READS_THE_GROUPS = not vllm.__version__.startswith("0.23")
"""vLLM PR #54427 (the fix of #54189), in 0.32 and 0.33 and not in 0.23: ``ModelOptNvFp4Config._from_config`` takes
``NVFP4`` whose every config group is weight-only for ``W4A16_NVFP4``."""
CONTRADICTIONS = [example.name for example in RULES["NV608"].examples]


def experts(tmp_path, example: str | None) -> tuple[torch.nn.Module, Path]:
    """The last layer's experts, built by vLLM from the export broken as ``example`` says (None: intact), and the
    checkpoint."""
    checkpoint = copy_of_export(tmp_path / "checkpoint")
    if example is not None:
        MODELOPT_CORPUS[example].make(checkpoint, MODELOPT_LAYOUT)
    return vllm_layers.build_moe_layer(checkpoint, LAYER), checkpoint


@pytest.mark.parametrize("example", CONTRADICTIONS)
def test_vllm_builds_the_experts_from_the_side_of_the_contradiction_its_release_reads(tmp_path, example):
    """0.23 reads quant_algo and builds W4A4 experts; 0.32 and 0.33 read the groups and build W4A16 ones."""
    layer, _ = experts(tmp_path, example)
    assert type(layer.quant_method).__name__ == "ModelOptNvFp4FusedMoE"
    assert layer.quant_method.use_a16 == READS_THE_GROUPS


def test_the_intact_export_is_built_w4a4_by_every_release(tmp_path):
    layer, _ = experts(tmp_path, None)
    assert layer.quant_method.use_a16 is False


def test_no_tensor_of_the_checkpoint_of_vllm_54189_sets_the_experts_activation_scales(tmp_path):
    """Without input scales in the shards, loading leaves both activation scales of the experts as vLLM allocated
    them (``torch.empty``: whatever the memory held). 0.23's W4A4 method folds them into the experts' alphas
    (``ModelOptNvFp4FusedMoE.process_weights_after_loading``; #54189 saw 0.0 there: every expert zeroed); the W4A16
    method 0.32 and 0.33 build does not read them (PR #54427)."""
    layer, checkpoint = experts(tmp_path, "modelopt-weight-only-groups")
    names = ("w13_input_scale", "w2_input_scale")
    before = {name: getattr(layer, name).detach().clone().view(torch.int32) for name in names}
    vllm_layers.load_into_layer(layer, vllm_layers.expert_tensors(checkpoint, LAYER))
    for name, made in before.items():
        assert torch.equal(getattr(layer, name).detach().view(torch.int32), made), name  # bit for bit, NaN too


def test_vllm_refuses_compressed_tensors_nvfp4_experts_declared_in_groups_of_32(tmp_path, legacy_nvfp4):
    """vLLM takes a compressed-tensors group for NVFP4 only where its group size is 16 (``_is_nvfp4_format``)."""
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(legacy_nvfp4, checkpoint)
    CORPUS["nvfp4-groups-of-32"].make(checkpoint, COMPRESSED_TENSORS_LAYOUT)
    with pytest.raises(RuntimeError, match=r"Unsupported FusedMoe scheme: num_bits=4 type=.float. .*group_size=32"):
        vllm_layers.build_moe_layer(checkpoint, LAYER)


def test_vllm_refuses_compressed_tensors_nvfp4_experts_whose_input_activations_are_in_groups_of_32(
    tmp_path, legacy_nvfp4
):
    """The weights' groups of 16 are not enough: a W4A4 group's input activations must be NVFP4's too."""
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(legacy_nvfp4, checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    for group in config["quantization_config"]["config_groups"].values():
        group["input_activations"]["group_size"] = 32
    (checkpoint / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="input quantization must also be NVFP4 format"):
        vllm_layers.build_moe_layer(checkpoint, LAYER)


def test_vllm_chooses_compressed_tensors_experts_scheme_from_the_weights_arguments_not_the_nvfp4_format(
    tmp_path, legacy_nvfp4
):
    """NV613: the group's format says nvfp4-pack-quantized, its weights num_bits 8; vLLM goes by the arguments."""
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(legacy_nvfp4, checkpoint)
    CORPUS["nvfp4-format-8-bit-weights"].make(checkpoint, COMPRESSED_TENSORS_LAYOUT)
    with pytest.raises(RuntimeError, match=r"Unsupported FusedMoe scheme: num_bits=8 type=.float."):
        vllm_layers.build_moe_layer(checkpoint, LAYER)


def test_vllm_sizes_modelopt_block_scales_for_the_declared_group_size_and_nvfp4_s_do_not_load(tmp_path):
    layer, checkpoint = experts(tmp_path, "nvfp4-groups-of-32")
    hidden = layer.w2_weight.shape[1]
    assert layer.w13_weight_scale.shape[-1] == hidden // 32
    with pytest.raises(RuntimeError, match="must match the size of tensor"):
        vllm_layers.load_into_layer(layer, vllm_layers.expert_tensors(checkpoint, LAYER))


def test_vllm_builds_a_qwen3_moe_router_the_declaration_does_not_exclude_as_fp4_and_refuses_its_weight(tmp_path):
    """NV611, ModelOpt PR #1858: Qwen3-MoE's block gives its router the quantization config. 0.32 and 0.33 build
    it as packed FP4 (on the emulation's kernel) and refuse the BF16 weight; 0.23, which the emulation does not
    patch, builds it with the NVFP4 linear method too, whose kernel selection refuses the CPU first."""
    checkpoint = copy_of_export(tmp_path / "checkpoint")
    MODELOPT_CORPUS["router-not-excluded"].make(checkpoint, MODELOPT_LAYOUT)
    if not READS_THE_GROUPS:  # 0.23
        with pytest.raises(ValueError, match="implement the NVFP4 linear layer"):
            vllm_layers.build_router(checkpoint, "model.layers.1.mlp.gate")
        return
    router = vllm_layers.build_router(checkpoint, "model.layers.1.mlp.gate")
    assert router.weight.dtype == torch.uint8
    weight = checkpoint_tensors(checkpoint, lambda name: name == "model.layers.1.mlp.gate.weight")
    (tensor,) = weight.values()
    with pytest.raises(AssertionError, match="Tried to load weights of size"):
        router.weight.weight_loader(router.weight, tensor)


def test_vllm_builds_the_router_the_export_excludes_unquantized(tmp_path):
    router = vllm_layers.build_router(copy_of_export(tmp_path / "checkpoint"), "model.layers.1.mlp.gate")
    assert type(router.quant_method).__name__ == "UnquantizedLinearMethod"
