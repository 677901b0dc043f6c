"""A toy Qwen3-MoE that quantizes in seconds on a CPU, entirely offline.

Used by ``scalar-scales demo``, the tests and the benchmarks. The model is
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

import torch

__all__ = [
    "SCHEMES",
    "VOCAB_SIZE",
    "build_toy_checkpoint",
    "calibration_dataset",
    "load_reference",
    "oneshot_kwargs",
    "prompt_ids",
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
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config or toy_config(), dtype=torch.bfloat16)
    directory = Path(directory)
    model.save_pretrained(directory)
    toy_tokenizer().save_pretrained(directory)
    return directory


def calibration_dataset(*, seed: int = 0) -> Any:
    from datasets import Dataset

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB_SIZE, (CALIBRATION_SAMPLES, CALIBRATION_LENGTH), generator=generator)
    return Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist()})


def prompt_ids(*, count: int = 2, length: int = 16, seed: int = 1) -> list[list[int]]:
    """Fixed token-id prompts, the same wherever they are made (serving tests compare across environments)."""
    ids = torch.randint(0, VOCAB_SIZE, (count, length), generator=torch.Generator().manual_seed(seed))
    return ids.tolist()


def recipe(scheme: str) -> Any:
    """The NVFP4 preset recipe that llm-compressor's examples use for MoE models."""
    from llmcompressor.modifiers.quantization import QuantizationModifier

    ignore = ["lm_head", "re:.*mlp.gate$", *_EXTRA_IGNORE.get(scheme, [])]
    return QuantizationModifier(targets="Linear", scheme=scheme, ignore=ignore)


def oneshot_kwargs(scheme: str) -> dict[str, Any]:
    """Arguments for ``oneshot``: calibration data only where the scheme has activation scales."""
    kwargs: dict[str, Any] = {"recipe": recipe(scheme), "processor": toy_tokenizer()}
    if scheme in CALIBRATED_SCHEMES:
        kwargs.update(
            dataset=calibration_dataset(),
            num_calibration_samples=CALIBRATION_SAMPLES,
            max_seq_length=CALIBRATION_LENGTH,
        )
    return kwargs


def _drop_broken_lazy_modules() -> None:
    """Forget lazy alias modules that cannot be listed without torchvision.

    transformers 5.17 patches ``from_pretrained`` by calling ``dir()`` on every
    module in ``sys.modules``; its image-processor aliases (no ``__file__``)
    import torchvision when listed. Where torchvision is absent, or broken
    beside a CPU torch, that raises, so we drop just those aliases.
    """
    import sys

    for name, module in list(sys.modules.items()):
        if module is None or getattr(module, "__file__", None) is not None:
            continue
        try:
            dir(module)
        except Exception:
            del sys.modules[name]


def load_reference(directory: str | os.PathLike[str]) -> Any:
    """Load a compressed MoE checkpoint for reference inside ``load_quantizable_moe()``.

    Plain ``from_pretrained`` dequantizes fused experts without their
    ``weight_global_scale`` (transformers issue 48371); linearized experts
    are ordinary quantized Linear modules and decompress correctly.

    ``load_quantizable_moe`` leaves its save mapping registered process-wide
    for the model type, after which a plain ``from_pretrained`` of the same
    architecture silently re-initialises its experts. The loaded model keeps
    its own save mapping (``_weight_conversions``), so we put the global one back.
    """
    from llmcompressor.modeling.moe.linearize import load_quantizable_moe
    from transformers import AutoConfig, AutoModelForCausalLM, conversion_mapping

    _drop_broken_lazy_modules()
    model_type = AutoConfig.from_pretrained(directory).model_type
    mapping = conversion_mapping.get_checkpoint_conversion_mapping(model_type)
    user_registered = model_type in conversion_mapping.USER_REGISTERED_MAPPINGS
    try:
        with load_quantizable_moe():
            return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16)
    finally:
        if mapping is None:
            conversion_mapping._checkpoint_conversion_mapping_cache.pop(model_type, None)
        else:
            conversion_mapping.register_checkpoint_conversion_mapping(model_type, mapping, overwrite=True)
        if not user_registered:
            conversion_mapping.USER_REGISTERED_MAPPINGS.discard(model_type)
