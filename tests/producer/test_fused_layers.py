"""What llm-compressor does with the layers the engines fuse: the SGLang plugin (docs/sglang.md) refuses fused
parts whose global scales differ, and llm-compressor's checkpoints load because it gives such parts one."""

from __future__ import annotations

from llmcompressor.observers.helpers import FUSED_LAYER_NAMES


def test_llm_compressor_shares_the_global_scale_of_the_mla_a_projections_sglang_fuses():
    assert ("q_a_proj", "kv_a_proj_with_mqa") in FUSED_LAYER_NAMES
