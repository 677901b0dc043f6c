"""A malformed global scale fails the save with an error that names it, and writes no weights."""

from __future__ import annotations

import pytest
import torch
from llmcompressor import oneshot

import compressed_tensors_patch
from compressed_tensors_patch import toy_moe
from scalar_scales_testkit.producer import load_bf16

BAD = "model.layers.0.self_attn.q_proj.weight_global_scale"


def test_global_scale_with_two_elements_fails_the_save_naming_the_tensor(bf16_dir, tmp_path):
    model = load_bf16(bf16_dir)
    oneshot(model=model, **toy_moe.oneshot_kwargs("NVFP4A16"))
    model.model.layers[0].self_attn.q_proj.weight_global_scale = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    with compressed_tensors_patch.applied(), pytest.raises(compressed_tensors_patch.GlobalScaleShapeError) as error:
        model.save_pretrained(tmp_path, save_compressed=True)
    assert str(error.value) == (
        f"{BAD} has shape (2,) (2 elements); a per-tensor global scale must hold exactly one value"
    )
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith((".safetensors", ".safetensors.index.json"))]
