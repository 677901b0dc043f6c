"""SGLang 0.5.23's loaders that fuse MLA a-projections into one layer, each given a checkpoint it loads on the CPU.

The DeepSeek-V3 and GLM-4-MoE-Lite toys (``scalar_scales_testkit.toys``) are
whole models quantized by llm-compressor. The other loaders' models are
loaded from a checkpoint written here: the model's config at the toys' MLA
sizes, one or two layers, and only the MLA a-projections' tensors, NVFP4 as
llm-compressor wrote them for the DeepSeek-V3 toy (its layer 0's
``q_a_proj`` and ``kv_a_proj_with_mqa``), under the names the model's
checkpoints give them; the quantization config quantizes those two and
ignores every other layer, which keeps SGLang's initial values. So a load
goes through the model's own ``load_weights``, and SGLang's ``get_model``
around it, as far as the fused layer's scales, which is what is observed.
A draft is loaded as SGLang's speculative worker loads one
(``sglang_cpu.load_model(draft=True)``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DOC",
    "FORMS",
    "LOADERS",
    "LOADS",
    "NVFP4_DROPPED",
    "PARTS",
    "REFUSES",
    "Loader",
    "documented",
    "expected_with_a_fix",
    "marked",
    "outcome",
    "write_checkpoint",
]

PARTS = ("q_a_proj", "kv_a_proj_with_mqa")
_TENSORS = ("weight_packed", "weight_scale", "weight_global_scale", "input_global_scale")
_MLA = (
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "vocab_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "intermediate_size",
    "tie_word_embeddings",
    "bos_token_id",
    "eos_token_id",
)


@dataclass(frozen=True)
class Loader:
    """One of SGLang's loader functions that fuse the a-projections, and how a model reaches it."""

    function: str
    """Where SGLang fuses: ``file:Class.method``, under ``sglang/srt/models/``."""
    architecture: str
    """The config's architecture; a draft's is the target's, which SGLang renames to its draft class."""
    draft: bool
    prefixes: tuple[str, ...]
    """The checkpoint's names of the attention modules whose ``q_a_proj`` and ``kv_a_proj_with_mqa`` it holds."""
    config: dict[str, Any] = field(default_factory=dict)
    """What the config adds to (or changes in) the DeepSeek-V3 toy's MLA sizes."""
    toy: str | None = None
    """The llm-compressor toy whose whole checkpoint this config starts from, or None for only the MLA sizes."""
    inputs: int = 1
    """How many hidden states the a-projections take, side by side (EAGLE-3's take two: the embedding's and the
    target's); their NVFP4 weights repeat the toy's that often along the input."""


LOADERS: dict[str, Loader] = {
    "deepseek-v3": Loader(
        "deepseek_common/deepseek_weight_loader.py:DeepseekV2WeightLoaderMixin.do_load_weights",
        "DeepseekV3ForCausalLM",
        False,
        ("model.layers.0.self_attn", "model.layers.1.self_attn"),
        toy="deepseek-v3",
    ),
    "glm4-moe-lite": Loader(
        "glm4_moe_lite.py:Glm4MoeLiteForCausalLM.load_weights",
        "Glm4MoeLiteForCausalLM",
        False,
        ("model.layers.0.self_attn", "model.layers.1.self_attn"),
        toy="glm4-moe-lite",
    ),
    "deepseek-v3-nextn": Loader(
        "deepseek_nextn.py:DeepseekV3ForCausalLMNextN.load_weights (deepseek_weight_loader's, is_nextn)",
        "DeepseekV3ForCausalLM",
        True,
        ("model.layers.2.self_attn",),
        toy="deepseek-v3",
    ),
    "glm4-moe-lite-nextn": Loader(
        "glm4_moe_lite_nextn.py:Glm4MoeLiteForCausalLMNextN.load_weights (glm4_moe_lite's, is_nextn)",
        "Glm4MoeLiteForCausalLM",
        True,
        ("model.layers.2.self_attn",),
        {"num_nextn_predict_layers": 1},
        toy="glm4-moe-lite",
    ),
    "kimi-k3": Loader(
        "kimi_k3.py:KimiK3LinearForCausalLM.load_weights",
        "KimiK3LinearForCausalLM",
        False,
        ("model.layers.0.self_attn",),
        {"model_type": "kimi_linear", "num_hidden_layers": 1},
    ),
    "kimi-k25-eagle3": Loader(
        "kimi_k25_eagle3.py:Eagle3DeepseekV2ForCausalLM.load_weights",
        "Eagle3DeepseekV2ForCausalLM",
        True,
        ("layers.0.self_attn",),
        {"model_type": "deepseek_v3", "num_hidden_layers": 1},
        inputs=2,
    ),
    "longcat-flash": Loader(
        "longcat_flash.py:LongcatFlashForCausalLM.load_weights",
        "LongcatFlashForCausalLM",
        False,
        ("model.layers.0.self_attn.0", "model.layers.0.self_attn.1"),
        {
            "model_type": "longcat_flash",
            "num_layers": 1,
            "ffn_hidden_size": 512,
            "expert_ffn_hidden_size": 64,
            "n_routed_experts": 8,
            "moe_topk": 2,
            "zero_expert_num": 0,
            "num_nextn_predict_layers": 1,
        },
    ),
}
"""The loaders loaded on the CPU, by a name of ours. The toys' own (DeepSeek-V3's, GLM-4-MoE-Lite's) are loaded
from their whole artifacts too (tests/sglang_loading/test_sglang_loading.py)."""

NVFP4_DROPPED = {
    "longcat-flash-nextn": Loader(
        "longcat_flash_nextn.py:LongcatFlashForCausalLMNextN.load_weights",
        "LongcatFlashForCausalLM",
        True,
        ("model.mtp.layers.0.self_attn",),
        LOADERS["longcat-flash"].config,
    )
}
"""Loaders that fuse, but never reach the fusion with a compressed-tensors NVFP4 checkpoint's tensors: LongCat's
NextN loader keeps the MTP layer's tensors its table of FP8 names lists, and drops the rest."""

FORMS = ("legacy", "format2", "legacy, differing", "format2, differing")
"""A checkpoint's forms: its global scales (1,) or 0-D, and ``kv_a_proj_with_mqa``'s weight global scale equal to
``q_a_proj``'s or twice it."""

LOADS = "loads the checkpoint's scale"
REFUSES = "refused, naming both tensors"
"""An error that names both parts' tensors, not the fused layer's alone (that both the plugin's and the upstream
patch's name the checkpoint's where a draft's loader renames them is tested on its own)."""
_KNOWN_FAILURES = {
    "AssertionError: param.shape=torch.Size([1]) param.dtype=torch.float32 loaded_weight.shape=torch.Size([2])": (
        "fails: AssertionError, shape (2,) into (1,)"
    ),
    "RuntimeError: zero-dimensional tensor (at position 0) cannot be concatenated": (
        "fails: RuntimeError, torch.cat of 0-D"
    ),
    "IndexError: tuple index out of range": "fails: IndexError, shape[0] of 0-D",
}


def outcome(found: dict[str, Any], scales: dict[str, float]) -> str:
    """What SGLang did with a checkpoint, in the words of docs/sglang.md's table: ``found`` is load_artifact.py's
    line, ``scales`` the checkpoint's global scales of its first attention (:func:`write_checkpoint`)."""
    names = {
        (part, scale): name
        for name in scales
        for part in PARTS
        for scale in ("weight", "input")
        if f".{part}.{scale}_" in name
    }
    q_a, kv_a = (scales[names[part, "weight"]] for part in PARTS)
    if not found["loaded"]:
        error: str = found["error"]
        if all(f".{part}.weight_global_scale" in error for part in PARTS):  # both parts' tensors, not the fused
            return REFUSES
        return next((said for start, said in _KNOWN_FAILURES.items() if error.startswith(start)), error[:80])
    weight = {v for name, values in found["fused"].items() if name.endswith(".weight_global_scale") for v in values}
    activation = {v for name, values in found["fused"].items() if name.endswith(".input_global_scale") for v in values}
    if activation != {scales[names[PARTS[0], "input"]]} or not weight:
        return "loads, scales not the checkpoint's"
    if weight == {q_a}:
        return LOADS if q_a == kv_a else "loads, q_a_proj's scale for both"
    return "loads, scales not the checkpoint's"


def _config(toy: Path, loader: Loader) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((toy / "config.json").read_text())
    config.pop("quantization_config")
    if loader.toy is None:
        config = {key: config[key] for key in _MLA}
    return {**config, **loader.config, "architectures": [loader.architecture]}


def write_checkpoint(
    out: Path, source: Path, loader: Loader, *, toy: Path | None = None, kv_a_factor: float = 1.0
) -> dict[str, float]:
    """Write ``loader``'s checkpoint into ``out`` from ``source``, an artifact of the DeepSeek-V3 toy as SGLang
    serves it (one form: its global scales' shape is the checkpoint's), with the config of ``toy``, an artifact
    of ``loader.toy`` (default: ``source``), and the first prefix's ``kv_a_proj_with_mqa`` weight global scale
    times ``kv_a_factor``; return the checkpoint's global scales of that first prefix, by name."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = load_file(source / "model.safetensors")
    quantization = json.loads((source / "config.json").read_text())["quantization_config"]
    quantization["ignore"] = ["lm_head", f"re:^(?!.*({'|'.join(PARTS)})$).*"]
    written = {}
    for prefix in loader.prefixes:
        for part in PARTS:
            for tensor in _TENSORS:
                value = tensors[f"model.layers.0.self_attn.{part}.{tensor}"].clone()
                if value.dim() == 2:
                    value = torch.cat([value] * loader.inputs, dim=1)
                if (prefix, part, tensor) == (loader.prefixes[0], PARTS[1], "weight_global_scale"):
                    value = value * kv_a_factor
                written[f"{prefix}.{part}.{tensor}"] = value
    out.mkdir(parents=True)
    save_file(written, out / "model.safetensors", metadata={"format": "pt"})
    config = {**_config(toy or source, loader), "quantization_config": quantization}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, out / name)
    first = loader.prefixes[0]
    return {
        f"{first}.{part}.{scale}": float(written[f"{first}.{part}.{scale}"].reshape(()).item())
        for part in PARTS
        for scale in ("weight_global_scale", "input_global_scale")
    }


DOC = Path(__file__).parents[2] / "docs" / "sglang.md"
"""Whose table of the loaders' outcomes the tests check, cell by cell."""


def documented(name: str, fix: str) -> dict[str, str]:
    """docs/sglang.md's row of that loader and fix (``none``, ``plugin``, ``upstream patch``): each form's cell."""
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 + len(FORMS) and cells[0] == f"`{LOADERS[name].function}`" and cells[1] == fix:
            return dict(zip(FORMS, cells[2:], strict=True))
    raise AssertionError(f"docs/sglang.md has no row of {name} with fix {fix}")


def marked(said: str) -> str:
    """A cell: right (the checkpoint's scale, or a refusal naming both tensors) or wrong."""
    return f"{'✅' if said in (LOADS, REFUSES) else '❌'} {said}"


def expected_with_a_fix(form: str) -> str:
    """What a fix must do with a form: load the checkpoint's scale, or refuse parts that differ by name."""
    return marked(REFUSES if form.endswith("differing") else LOADS)
