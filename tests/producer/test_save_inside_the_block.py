"""README ("Using the producer fix"): the save must happen inside ``applied()``. The patch changes what is
written, not the model: a model quantized inside the block and saved after it exits is written legacy (1,)."""

from __future__ import annotations

from llmcompressor import oneshot

import compressed_tensors_patch
from compressed_tensors_patch import toy_moe
from scalar_scales_testkit.checkpoints import global_scale_shapes
from scalar_scales_testkit.producer import load_bf16


def test_a_model_quantized_inside_the_block_and_saved_after_it_is_written_legacy(bf16_dir, tmp_path):
    with compressed_tensors_patch.applied():
        model = load_bf16(bf16_dir)
        oneshot(model=model, **toy_moe.oneshot_kwargs("NVFP4A16"))
    model.save_pretrained(tmp_path, save_compressed=True)
    assert global_scale_shapes(tmp_path) == {(1,)}
