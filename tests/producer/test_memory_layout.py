"""3c: in memory every global scale stays (1,); only what is written changes."""

from __future__ import annotations

import torch
from llmcompressor import oneshot

import compressed_tensors_patch
from compressed_tensors_patch import toy_moe
from scalar_scales.nvfp4 import is_global_scale
from scalar_scales_testkit.producer import load_bf16, load_reference


def _global_scale_shapes(model: torch.nn.Module) -> set[tuple[int, ...]]:
    return {tuple(p.shape) for name, p in model.named_parameters() if is_global_scale(name)}


def test_global_scales_stay_shape_1_during_patched_calibration(bf16_dir):
    seen: set[tuple[int, ...]] = set()

    def record(module: torch.nn.Module, args: object) -> None:
        for name, scale in module.named_parameters(recurse=False):
            if is_global_scale(name):
                seen.add(tuple(scale.shape))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        with compressed_tensors_patch.applied():
            model = load_bf16(bf16_dir)
            oneshot(model=model, **toy_moe.oneshot_kwargs("NVFP4"))
    finally:
        handle.remove()
    assert seen == {(1,)}
    assert _global_scale_shapes(model) == {(1,)}


def test_patched_save_then_forward_restores_shape_1_in_memory(bf16_dir, tmp_path, prompt_ids):
    with compressed_tensors_patch.applied():
        model = load_bf16(bf16_dir)
        oneshot(model=model, **toy_moe.oneshot_kwargs("NVFP4A16"))
        model.save_pretrained(tmp_path, save_compressed=True)
        with torch.no_grad():
            model(prompt_ids)
    assert _global_scale_shapes(model) == {(1,)}


def test_patched_load_of_format2_decompresses_to_shape_1(artifact, prompt_ids):
    with compressed_tensors_patch.applied():
        model = load_reference(artifact("NVFP4", patched=True))
        with torch.no_grad():
            model(prompt_ids)
    assert _global_scale_shapes(model) == {(1,)}
