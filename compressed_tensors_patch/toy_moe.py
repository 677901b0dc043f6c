"""A toy Qwen3-MoE that quantizes in seconds on a CPU, entirely offline.

Used by the demo (``scalar-scales-demo``), and by the test kit. The model is
written to disk in bf16 first because llm-compressor 0.14 reads the model's
on-disk config during ``oneshot``; that also makes the bf16 folder the
reference every quantized artifact is compared with. The tokenizer is a real
word-level tokenizer over ``t0 .. t1023``, built locally, so nothing touches a
hub.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = [
    "SCHEMES",
    "VOCAB_SIZE",
    "build_toy_checkpoint",
    "calibration_dataset",
    "oneshot_kwargs",
    "recipe",
    "toy_config",
    "toy_tokenizer",
]

VOCAB_SIZE = 1024
SCHEMES: tuple[str, ...] = ("NVFP4", "NVFP4A16")
"""The NVFP4 presets: NVFP4 is calibrated (it has input global scales), NVFP4A16 is data-free."""

CALIBRATED_SCHEMES: tuple[str, ...] = ("NVFP4", "FP8")
"""Schemes with static activation scales, which need calibration data."""

_EXTRA_IGNORE: dict[str, list[str]] = {"W4A16": ["re:.*down_proj$"]}
"""W4A16's group of 128 does not divide the toy experts' 64-wide down_proj input."""

CALIBRATION_SAMPLES = 16
CALIBRATION_LENGTH = 32


def toy_config() -> Any:
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        tie_word_embeddings=False,
    )


def toy_tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(VOCAB_SIZE)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="t0", eos_token="t1", pad_token="t2")


def build_toy_checkpoint(directory: str | os.PathLike[str], *, config: Any = None, seed: int = 0) -> Path:
    """Write a randomly initialised bf16 MoE (default: the toy Qwen3-MoE) and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config or toy_config(), dtype=torch.bfloat16)
    directory = Path(directory)
    model.save_pretrained(directory)
    toy_tokenizer().save_pretrained(directory)
    return directory


def calibration_dataset(*, seed: int = 0) -> Any:
    import torch
    from datasets import Dataset

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB_SIZE, (CALIBRATION_SAMPLES, CALIBRATION_LENGTH), generator=generator)
    return Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()})


def recipe(scheme: str, ignore_also: list[str] | None = None) -> Any:
    """The NVFP4 preset recipe that llm-compressor's examples use for MoE models: routers stay unquantized
    (vLLM builds Qwen2-MoE's ``shared_expert_gate`` without a quantization config); ``ignore_also``: more
    modules left unquantized."""
    from llmcompressor.modifiers.quantization import QuantizationModifier

    ignore = ["lm_head", "re:.*mlp.gate$", "re:.*mlp.shared_expert_gate$", *_EXTRA_IGNORE.get(scheme, [])]
    ignore += ignore_also or []
    return QuantizationModifier(targets="Linear", scheme=scheme, ignore=ignore)


def oneshot_kwargs(scheme: str, ignore_also: list[str] | None = None) -> dict[str, Any]:
    """Arguments for ``oneshot``: calibration data only where the scheme has activation scales."""
    kwargs: dict[str, Any] = {"recipe": recipe(scheme, ignore_also), "processor": toy_tokenizer()}
    if scheme in CALIBRATED_SCHEMES:
        kwargs.update(
            dataset=calibration_dataset(),
            num_calibration_samples=CALIBRATION_SAMPLES,
            max_seq_length=CALIBRATION_LENGTH,
        )
    return kwargs
