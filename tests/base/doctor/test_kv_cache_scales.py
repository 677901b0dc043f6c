"""The values of a declared KV cache's scales are checked by default (NV301), in either shape and either layout's
names: a k_scale of 0 or a v_scale of NaN in a checkpoint that declares an FP8 KV cache is never a clean bill.

ModelOpt's are NVIDIA's own export with an FP8 KV cache (``nvfp4-fp8-kv``:
``self_attn.k_proj.k_scale``, 0-D); compressed-tensors' are the synthetic
checkpoint with a ``kv_cache_scheme`` and ``self_attn.k_scale`` tensors of
shape (1,), as llm-compressor writes them.
"""

from __future__ import annotations

import json
import math
import struct

import pytest

from scalar_scales.doctor.examples import Example, Remove
from scalar_scales.nvfp4 import COMPRESSED_TENSORS_LAYOUT, MODELOPT_LAYOUT
from scalar_scales_testkit.broken import CORPUS, clean_checkpoint, make_example, rewrite_shard, shard_of
from scalar_scales_testkit.cli import run_cli_in_process
from scalar_scales_testkit.modelopt_exports import copy_of_export, exported

MODELOPT_K = "model.layers.1.self_attn.k_proj.k_scale"
MODELOPT_V = "model.layers.1.self_attn.v_proj.v_scale"
CT_K = "model.layers.0.self_attn.k_scale"
CT_V = "model.layers.0.self_attn.v_scale"


def set_scale(checkpoint, name, value, shape=None):
    """Give the one-value tensor ``name`` another value (and shape)."""

    def change(tensors):
        tensors[name]["data"] = struct.pack("<f", value)
        if shape is not None:
            tensors[name]["shape"] = shape

    rewrite_shard(shard_of(checkpoint, name), change)
    return checkpoint


def compressed_tensors_with_kv_scales(directory, k=1.0, v=1.0):
    """The clean synthetic checkpoint with a declared FP8 KV cache and its (1,) scales."""
    checkpoint = clean_checkpoint(directory)
    CORPUS["kv-scales-missing"].make(checkpoint, COMPRESSED_TENSORS_LAYOUT)
    CORPUS["kv-scales-undeclared"].make(checkpoint, COMPRESSED_TENSORS_LAYOUT)
    set_scale(checkpoint, CT_K, k, [1])
    return set_scale(checkpoint, CT_V, v, [1])


def kv_findings(checkpoint):
    document = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)
    return {
        f["tensor"]: f for f in document["findings"] if f["tensor"] and f["tensor"].endswith(("k_scale", "v_scale"))
    }


def test_the_real_fp8_kv_export_passes_and_says_how_many_kv_cache_scales_it_checked():
    result = run_cli_in_process("check", exported("nvfp4-fp8-kv"))
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[0].endswith(", 4 KV-cache scales")


def test_a_k_scale_of_0_in_an_export_is_an_error_that_says_vllm_refuses_the_model(tmp_path):
    checkpoint = set_scale(copy_of_export(tmp_path / "export", "nvfp4-fp8-kv"), MODELOPT_K, 0.0)
    finding = kv_findings(checkpoint)[MODELOPT_K]
    assert (finding["code"], finding["severity"]) == ("NV301", "error")
    assert finding["message"].startswith(
        "is 0.0: vLLM's quantized KV cache refuses to load the model (its KV-cache method asserts k_scale > 0; "
        "observed: the engine does not start)"
    )
    assert run_cli_in_process("check", checkpoint).returncode == 1


def test_a_v_scale_of_nan_in_an_export_says_vllm_uses_k_scale_in_its_place(tmp_path):
    checkpoint = set_scale(copy_of_export(tmp_path / "export", "nvfp4-fp8-kv"), MODELOPT_V, math.nan)
    finding = kv_findings(checkpoint)[MODELOPT_V]
    assert finding["code"] == "NV301"
    assert finding["message"].startswith("is NaN: vLLM's quantized KV cache uses k_scale in its place")


def test_a_kv_scale_of_shape_1_is_judged_by_its_value_alone(tmp_path):
    """vLLM takes a KV-cache scale in either shape; migrate leaves them alone, so NV101 does not speak of them."""
    checkpoint = copy_of_export(tmp_path / "export", "nvfp4-fp8-kv")
    set_scale(checkpoint, MODELOPT_K, -1.0, [1])
    assert [f["code"] for f in kv_findings(checkpoint).values()] == ["NV301"]


@pytest.mark.parametrize(("k", "v", "wrong"), [(0.0, 1.0, CT_K), (1.0, math.inf, CT_V), (-2.0, 1.0, CT_K)])
def test_compressed_tensors_kv_scales_of_shape_1_are_checked_by_default(tmp_path, k, v, wrong):
    checkpoint = compressed_tensors_with_kv_scales(tmp_path / "ct", k, v)
    assert list(kv_findings(checkpoint)) == [wrong]


@pytest.mark.parametrize("k", [0.0, math.nan])
def test_a_k_scale_of_0_or_nan_beside_a_negative_v_scale_says_vllm_refuses_with_no_way_out(tmp_path, k):
    """vLLM's KV-cache method uses 1.0 for both only where both are below 0; a k_scale of 0 or NaN fails its
    ``assert k_scale > 0`` whatever the v_scale is."""
    checkpoint = compressed_tensors_with_kv_scales(tmp_path / "ct", k, -1.0)
    message = kv_findings(checkpoint)[CT_K]["message"]
    assert message.endswith("asserts k_scale > 0; observed: the engine does not start)"), message


def test_a_negative_k_scale_says_a_negative_v_scale_makes_both_1(tmp_path):
    checkpoint = compressed_tensors_with_kv_scales(tmp_path / "ct", -1.0, -1.0)
    assert kv_findings(checkpoint)[CT_K]["message"].endswith("unless v_scale is negative too, when both become 1.0")


def test_intact_compressed_tensors_kv_scales_of_shape_1_give_no_finding(tmp_path):
    checkpoint = compressed_tensors_with_kv_scales(tmp_path / "ct")
    result = run_cli_in_process("check", checkpoint)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[0].endswith("(0 (1,), 48 0-D), 2 KV-cache scales")


def test_kv_scales_a_config_does_not_declare_are_not_judged_by_value(tmp_path):
    """NV606 says they are there; vLLM serves the checkpoint as without them, whatever their values."""
    checkpoint = clean_checkpoint(tmp_path / "ct")
    CORPUS["kv-scales-undeclared"].make(checkpoint, COMPRESSED_TENSORS_LAYOUT)
    set_scale(checkpoint, CT_K, 0.0)
    assert kv_findings(checkpoint) == {}


def test_a_k_scale_without_its_v_scale_is_nv610_saying_vllm_keeps_1_for_the_v_scale(tmp_path):
    """NV610's other direction, in compressed-tensors' layout: vLLM's compressed-tensors KV-cache method starts
    both scales at 1.0 and keeps it for the one not loaded."""
    checkpoint = compressed_tensors_with_kv_scales(tmp_path / "checkpoint")
    make_example(Example("k-scale-only", "", (Remove(CT_V),)), checkpoint, COMPRESSED_TENSORS_LAYOUT)
    document = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)
    (finding,) = document["findings"]
    assert (finding["code"], finding["severity"], finding["tensor"]) == ("NV610", "error", CT_K)
    assert finding["detail"] == (
        "the config declares a quantized KV cache, and model.layers.0.self_attn has its k_scale but no v_scale"
    )
    assert "keep 1.0 for the missing v_scale: that cache is quantized with a scale of 1.0" in finding["why"]


def test_an_export_layer_with_v_scale_alone_is_nv610_saying_vllm_asserts_k_scale(tmp_path):
    """ModelOpt's names (``k_proj.k_scale``, ``v_proj.v_scale``) pair by their attention module, as vLLM remaps
    them; vLLM #46264."""
    checkpoint = copy_of_export(tmp_path / "export", "nvfp4-fp8-kv")
    make_example(Example("v-scale-only", "", (Remove(MODELOPT_K),)), checkpoint, MODELOPT_LAYOUT)
    document = json.loads(run_cli_in_process("check", checkpoint, "--json").stdout)
    (finding,) = document["findings"]
    assert (finding["code"], finding["tensor"]) == ("NV610", MODELOPT_V)
    assert "assert k_scale > 0 after loading" in finding["why"]
