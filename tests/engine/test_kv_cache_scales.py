"""What vLLM does with a declared FP8 KV cache's scales that are not above 0, as `scalar-scales check` (NV301) says:
NVIDIA's FP8-KV export (``nvfp4-fp8-kv``), one scale changed, served on the CPU through the emulation.

vLLM's KV-cache method (``BaseKVCacheMethod.process_weights_after_loading``)
asserts ``k_scale > 0`` unless both scales are negative, and takes the larger
of the two for both where ``v_scale`` is not above 0.
"""

from __future__ import annotations

import shutil
import struct

from scalar_scales_testkit.broken import rewrite_shard, shard_of
from scalar_scales_testkit.modelopt_exports import exported

LAYER = "model.layers.1.self_attn"


def with_scale(tmp_path, name, value):
    checkpoint = tmp_path / "export"
    shutil.copytree(exported("nvfp4-fp8-kv"), checkpoint)

    def change(tensors):
        tensors[name]["data"] = struct.pack("<f", value)

    rewrite_shard(shard_of(checkpoint, name), change)
    return checkpoint


def test_a_k_scale_of_0_stops_the_engine_in_vllms_kv_cache_method(serve, tmp_path):
    served = serve(with_scale(tmp_path, f"{LAYER}.k_proj.k_scale", 0.0))
    assert served.returncode != 0
    assert "assert layer.k_scale > 0.0" in served.log and "AssertionError" in served.log


def test_a_v_scale_of_0_is_served_with_k_scale_in_its_place(serve, tmp_path):
    served = serve(with_scale(tmp_path, f"{LAYER}.v_proj.v_scale", 0.0))
    assert served.returncode == 0, served.log[-3000:]
    assert [len(tokens) for tokens in served.tokens] == [16, 16]
