"""Toy MoE architectures beyond the built-in Qwen3-MoE: the model families NVFP4 is mostly used on.

- ``olmoe``: routed experts only, with q/k norms over all heads (OLMoE),
  the model the tensor- and expert-parallel runs were first tried on.
- ``qwen2-moe``: a shared expert with a shared-expert gate (Qwen2-MoE).
- ``deepseek-v3``: a shared expert and MLA attention (DeepSeek-V3, the seed
  report's family), with a dense first layer and ``noaux_tc`` routing.
  MLA keeps the dimensions vLLM's CPU MLA backend accepts: head dimension
  192 (128 without rotary embedding, 64 with), ``kv_lora_rank`` 512; smaller
  ones are refused ("Head dimension 48 is not supported by MLA"). A
  ``q_lora_rank`` makes vLLM fuse ``q_a_proj`` with ``kv_a_proj_with_mqa``.
- ``llama``: a dense Llama, no experts: the shape of NVIDIA's own published
  FP4 checkpoints (Llama-3.3-70B-FP4), exported by ModelOpt.
- ``glm4-moe-lite``: GLM-4.7-Flash's architecture, DeepSeek's MLA and MoE
  with GLM's own loader in SGLang (which fuses the MLA a-projections with a
  plain ``torch.cat``), at the DeepSeek-V3 toy's sizes.

Each is random bf16, written with ``compressed_tensors_patch.toy_moe``'s
tokenizer, and quantized by ``scripts/make_artifacts.py --toy NAME``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compressed_tensors_patch.toy_moe import VOCAB_SIZE, build_toy_checkpoint

__all__ = ["QWEN3_MOE", "TOYS", "build_toy"]

QWEN3_MOE = "qwen3-moe"
"""The built-in toy (``compressed_tensors_patch.toy_moe``), by the name the other toys go by."""

COMMON: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    "num_hidden_layers": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}
"""What every toy shares: the toy tokenizer's vocabulary, two layers, a short context, an untied head."""


def olmoe_config() -> Any:
    from transformers import OlmoeConfig

    return OlmoeConfig(
        **COMMON,
        hidden_size=128,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_experts=8,
        num_experts_per_tok=2,
    )


def qwen2_moe_config() -> Any:
    from transformers import Qwen2MoeConfig

    return Qwen2MoeConfig(
        **COMMON,
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=8,
        num_experts_per_tok=2,
    )


DEEPSEEK_MOE_WITH_MLA: dict[str, Any] = {
    **COMMON,
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 64,
    "first_k_dense_replace": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "q_lora_rank": 128,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}
"""DeepSeek-V3's MoE and MLA at the toy's sizes, which GLM-4-MoE-Lite shares."""


def deepseek_v3_config() -> Any:
    from transformers import DeepseekV3Config

    return DeepseekV3Config(**DEEPSEEK_MOE_WITH_MLA, topk_method="noaux_tc")


def glm4_moe_lite_config() -> Any:
    from transformers import Glm4MoeLiteConfig

    return Glm4MoeLiteConfig(**DEEPSEEK_MOE_WITH_MLA)


def llama_config() -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        **COMMON,
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
    )


TOYS: dict[str, Callable[[], Any]] = {
    "olmoe": olmoe_config,
    "qwen2-moe": qwen2_moe_config,
    "deepseek-v3": deepseek_v3_config,
    "glm4-moe-lite": glm4_moe_lite_config,
    "llama": llama_config,
}


def build_toy(name: str, directory: str | os.PathLike[str]) -> Path:
    """Write toy ``name``'s random bf16 checkpoint and tokenizer into ``directory`` (``qwen3-moe``: the built-in
    toy)."""
    return build_toy_checkpoint(directory, config=TOYS[name]() if name != QWEN3_MOE else None)
