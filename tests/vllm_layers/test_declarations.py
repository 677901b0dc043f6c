"""How each vLLM reads a ModelOpt declaration that contradicts itself (NV608): ``quant_algo: NVFP4`` (W4A4) over
config groups that all say ``input_activations: null`` (weight-only), as vLLM #54189's checkpoint does.

The checkpoint is NVIDIA's own export of the toy (nvidia-modelopt 0.47), broken as the broken corpus breaks it
(NV608's examples): the groups made weight-only, with and without the input scales W4A4 stores. vLLM builds the last
layer's experts from it, as its ``get_quant_config`` reads config.json, and loads them through its weight loader.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import vllm

from scalar_scales.doctor import RULES
from scalar_scales.nvfp4 import MODELOPT_LAYOUT
from scalar_scales_testkit import vllm_layers
from scalar_scales_testkit.broken import MODELOPT_CORPUS
from scalar_scales_testkit.modelopt_exports import copy_of_export

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
