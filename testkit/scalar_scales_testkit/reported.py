"""Failures users reported in public threads, each rebuilt as a tiny replica (:mod:`.replicas`) with the thread's
header layout and exactly its defect, and a control: the same replica without the defect.

One row of :data:`REPORTED` per thread: what the thread shows, what was inferred from it, the edit that makes the
replica, and what ``scalar-scales check`` must say about it:

- :class:`Caught`: the rules that must find the defect, each with its severity, and the tensor a finding names;
- :class:`Miss`: a class of defect no rule finds yet (issue 41), the severity a finding must have once one does,
  and the tensor it must name; its test is expected to fail until then;
- None: a consumer's bug, with no defect in the checkpoint: the replica must be clean.

tests/base/doctor/test_reported_failures.py holds ``check`` to each row; docs/reported-failures.md is
:func:`document` (``scripts/reported_failures.py`` writes it, the test command checks it is current).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from scalar_scales_testkit.replicas import (
    Replica,
    Tensor,
    bf16,
    ct_config,
    ct_module,
    modelopt_config,
    modelopt_module,
)

__all__ = [
    "ISSUE_41_THREADS",
    "MISSED_CLASSES",
    "REPORTED",
    "Caught",
    "Miss",
    "ReportedFailure",
    "described",
    "document",
]

Severity = Literal["info", "warning", "error"]

ISSUE_41_THREADS = frozenset(
    {
        "https://github.com/vllm-project/vllm/issues/43297",
        "https://github.com/vllm-project/vllm/issues/54189",
        "https://github.com/intel/auto-round/issues/2380",
        "https://github.com/NVIDIA/TensorRT-LLM/issues/6569",
        "https://github.com/modular/modular/issues/6600",
        "https://github.com/huggingface/transformers/issues/48371",
        "https://github.com/vllm-project/compressed-tensors/pull/637",
    }
)
"""The threads issue 41 itself names: this corpus is made of others."""

MISSED_CLASSES: dict[str, str] = {}
"""The classes of defect ``check`` does not find yet, by the name a :class:`Miss` gives."""


@dataclass(frozen=True)
class Caught:
    """The rules that find the defect (code -> severity, every finding's code), and the tensor one names."""

    codes: dict[str, Severity]
    names: str


@dataclass(frozen=True)
class Miss:
    """A defect of a class no rule finds yet: once one does, a finding of at least ``severity`` names ``names``
    (None: any finding of that severity, the class's rule being free to name the config)."""

    kind: str
    severity: Severity
    names: str | None


@dataclass(frozen=True)
class ReportedFailure:
    """One thread's failure: ``replica()`` is the control (for a consumer's bug, the replica itself), and
    ``defect`` turns it into the reported checkpoint (None for a consumer's bug)."""

    id: str
    thread: str
    project: str
    shows: str
    inferred: str
    edit: str
    replica: Callable[[], Replica]
    defect: Callable[[Replica], None] | None
    expected: Caught | Miss | None

    @property
    def verdict(self) -> str:
        match self.expected:
            case Caught(codes):
                return "caught: " + ", ".join(f"{code} ({severity})" for code, severity in codes.items())
            case Miss(kind):
                return f"known miss: {MISSED_CLASSES[kind]}"
            case None:
                return "consumer bug: the replica is clean"


# -- the replicas' layouts ---------------------------------------------------------------------------------------

_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_QWEN3_5_EXPERT = "model.language_model.layers.0.mlp.experts.1"
_MLP = ("gate_proj", "up_proj", "down_proj")


def _moe_layer(prefix: str, module: Callable[[str], list[Tensor]]) -> list[Tensor]:
    """An MoE decoder layer's tensors, each projection written by ``module`` (a producer's): attention, two
    experts unfused, and the router in BF16."""
    tensors = [tensor for projection in _ATTENTION for tensor in module(f"{prefix}.self_attn.{projection}")]
    for expert in range(2):
        for projection in _MLP:
            tensors += module(f"{prefix}.mlp.experts.{expert}.{projection}")
    return [*tensors, bf16(f"{prefix}.mlp.gate.weight", 2, 64)]


def _modelopt_moe(
    prefix: str = "model.layers.0", architecture: str = "Qwen3MoeForCausalLM", lm_head: str = "lm_head"
) -> Replica:
    """A ModelOpt NVFP4 MoE layer as ``export_hf_checkpoint`` writes it: experts unfused, attention quantized,
    the router and ``lm_head`` in BF16 and excluded by name, every scale 0-D."""
    tensors = [bf16("model.embed_tokens.weight", 128, 64), bf16("lm_head.weight", 128, 64)]
    tensors += _moe_layer(prefix, modelopt_module)
    exclude = (lm_head, f"{prefix}.mlp.gate")
    return Replica(
        {"model.safetensors": tensors}, {"architectures": [architecture]}, modelopt_config(exclude_modules=exclude)
    )


def _modelopt_dense(architecture: str, model: str = "model", rows: int = 32) -> Replica:
    """A ModelOpt NVFP4 dense decoder layer under ``model`` (``model.language_model`` for a multimodal class):
    attention and MLP projections, ``lm_head`` in BF16 and excluded."""
    tensors = [bf16(f"{model}.embed_tokens.weight", 128, 64), bf16("lm_head.weight", 128, 64)]
    for projection in _ATTENTION:
        tensors += modelopt_module(f"{model}.layers.0.self_attn.{projection}", rows=rows)
    for projection in _MLP:
        tensors += modelopt_module(f"{model}.layers.0.mlp.{projection}", rows=rows)
    return Replica({"model.safetensors": tensors}, {"architectures": [architecture]}, modelopt_config())


def _ct_dense(architecture: str, *, activations: bool = True) -> Replica:
    """A compressed-tensors NVFP4 dense decoder layer as llm-compressor writes it (W4A4, or NVFP4A16 without
    ``activations``), ``lm_head`` in BF16."""
    activation = 448.0 if activations else None
    tensors = [bf16("model.embed_tokens.weight", 128, 64), bf16("lm_head.weight", 128, 64)]
    for projection in _ATTENTION:
        tensors += ct_module(f"model.layers.0.self_attn.{projection}", activation=activation)
    for projection in _MLP:
        tensors += ct_module(f"model.layers.0.mlp.{projection}", activation=activation)
    return Replica({"model.safetensors": tensors}, ct_config(architecture, activations=activations))


def _ct_moe(prefix: str, architecture: str, ignore: tuple[str, ...] = ("lm_head",)) -> Replica:
    """A compressed-tensors NVFP4 MoE layer: experts unfused, the router in BF16 (vLLM builds it unquantized)."""
    tensors = [bf16("lm_head.weight", 128, 64), *_moe_layer(prefix, ct_module)]
    return Replica({"model.safetensors": tensors}, ct_config(architecture, ignore=ignore))


def _set(name: str, value: float) -> Callable[[Replica], None]:
    return lambda replica: replica.set_value(name, value)


def _remove(*names: str) -> Callable[[Replica], None]:
    def remove(replica: Replica) -> None:
        for name in names:
            replica.remove(name)

    return remove


# -- the threads' replicas ---------------------------------------------------------------------------------------


def _transposed(replica: Replica) -> None:
    for tensors in replica.shards.values():
        for tensor in tensors:
            if tensor.dtype == "U8":
                tensor.shape = tensor.shape[::-1]


def _fp8_weights(replica: Replica) -> None:
    for tensors in replica.shards.values():
        for tensor in tensors:
            if tensor.dtype == "U8":
                tensor.dtype, tensor.shape = "F8_E4M3", [tensor.shape[0], 2 * tensor.shape[1]]


def _half_group_scales(replica: Replica) -> None:
    for tensors in replica.shards.values():
        for tensor in tensors:
            if tensor.name.endswith(".weight_scale"):
                tensor.shape = [tensor.shape[0], tensor.shape[1] // 2]


def _quantized_lm_head(replica: Replica) -> None:
    replica.remove("lm_head.weight")
    replica.add(*modelopt_module("lm_head", rows=128))


def _denormal_input_scales(replica: Replica) -> None:
    for projection in _MLP:
        replica.set_value(f"{_QWEN3_5_EXPERT}.{projection}.input_scale", 1e-40)


def _router_not_excluded(replica: Replica) -> None:
    assert replica.modelopt is not None
    replica.modelopt["quantization"]["exclude_modules"] = ["lm_head"]


def _with_fp8_kv_cache(replica: Replica) -> Replica:
    assert replica.modelopt is not None
    replica.modelopt["quantization"]["kv_cache_quant_algo"] = "FP8"
    replica.add(
        Tensor("model.layers.0.self_attn.k_proj.k_scale", "F32", [], 0.0125),
        Tensor("model.layers.0.self_attn.v_proj.v_scale", "F32", [], 0.0203),
    )
    return replica


def _scale_only_shards() -> Replica:
    """Packed weights in one shard, every scale in another: the shards TensorRT-LLM's load hook took one at a
    time."""
    replica = _modelopt_dense("LlamaForCausalLM")
    (tensors,) = replica.shards.values()
    weights = [t for t in tensors if not t.name.endswith(("_scale", "_scale_2"))]
    scales = [t for t in tensors if t.name.endswith(("_scale", "_scale_2"))]
    replica.shards = {"model-00001-of-00002.safetensors": weights, "model-00002-of-00002.safetensors": scales}
    return replica


def _gemma4_k_eq_v() -> Replica:
    """Gemma 4 with ``attention_k_eq_v``: its full-attention layers have no ``v_proj`` (keys are the values)."""
    tensors = [bf16("model.language_model.embed_tokens.weight", 128, 64)]
    for layer, projections in ((0, _ATTENTION), (5, ("q_proj", "k_proj", "o_proj"))):
        for projection in projections:
            tensors += modelopt_module(f"model.language_model.layers.{layer}.self_attn.{projection}")
    layer_types = ["sliding_attention"] * 5 + ["full_attention"]
    config = {
        "architectures": ["Gemma4UnifiedForConditionalGeneration"],
        "text_config": {"attention_k_eq_v": True, "layer_types": layer_types, "num_hidden_layers": 6},
    }
    return Replica({"model.safetensors": tensors}, config, modelopt_config())


def _qwen3_5_linear_attention() -> Replica:
    """A Qwen3.5 Gated-DeltaNet layer with every projection NVFP4, as txn545's ModelOpt export holds them."""
    prefix = "model.language_model.layers.0.linear_attn"
    tensors = [
        bf16(f"{prefix}.conv1d.weight", 64, 1, 4),
        Tensor(f"{prefix}.A_log", "F32", [16]),
        bf16(f"{prefix}.dt_bias", 16),
    ]
    for projection, rows in (
        ("in_proj_qkv", 64),
        ("in_proj_z", 32),
        ("in_proj_a", 16),
        ("in_proj_b", 16),
        ("out_proj", 32),
    ):
        tensors += modelopt_module(f"{prefix}.{projection}", rows=rows)
    return Replica(
        {"model.safetensors": tensors}, {"architectures": ["Qwen3_5ForConditionalGeneration"]}, modelopt_config()
    )


def _qwen3_5_moe_bf16_linear_attention() -> Replica:
    """RedHatAI's Qwen3.5-MoE layout (llm-compressor): NVFP4 experts, the Gated-DeltaNet projections in BF16, each
    named in ``ignore`` with the ``linear_attn`` module and its norm."""
    replica = _ct_moe("model.language_model.layers.0", "Qwen3_5MoeForConditionalGeneration")
    prefix = "model.language_model.layers.1.linear_attn"
    projections = ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj")
    replica.add(*(bf16(f"{prefix}.{projection}.weight", 32, 64) for projection in projections))
    replica.add(bf16(f"{prefix}.norm.weight", 16), bf16(f"{prefix}.conv1d.weight", 64, 1, 4))
    assert replica.config is not None
    ignore = replica.config["quantization_config"]["ignore"]
    ignore += [prefix, f"{prefix}.norm", *(f"{prefix}.{projection}" for projection in projections)]
    return replica


def _minimax_m3_mixed() -> Replica:
    """nvidia/MiniMax-M3-NVFP4's layout: MIXED_PRECISION, routed experts NVFP4 (``w1``/``w2``/``w3``), attention
    MXFP8 (F8_E4M3 weights, E8M0 group scales of 32 stored as U8), the router in BF16 and excluded."""
    prefix = "model.layers.0"
    tensors = [bf16(f"{prefix}.block_sparse_moe.gate.weight", 2, 64)]
    layers: dict[str, dict[str, object]] = {}
    for projection in _ATTENTION:
        module = f"{prefix}.self_attn.{projection}"
        tensors += [Tensor(f"{module}.weight", "F8_E4M3", [32, 64]), Tensor(f"{module}.weight_scale", "U8", [32, 2])]
        layers[module] = {"quant_algo": "MXFP8"}
    for expert in range(2):
        for projection in ("w1", "w2", "w3"):
            module = f"{prefix}.block_sparse_moe.experts.{expert}.{projection}"
            tensors += modelopt_module(module)
            layers[module] = {"quant_algo": "NVFP4", "group_size": 16}
    modelopt = modelopt_config(
        "MIXED_PRECISION", exclude_modules=("lm_head", f"{prefix}.block_sparse_moe.gate"), quantized_layers=layers
    )
    return Replica({"model.safetensors": tensors}, {"architectures": ["MiniMaxM3ForCausalLM"]}, modelopt)


def _nemotron_h_non_gated() -> Replica:
    """A Nemotron-H MoE layer as llm-compressor's NVFP4 recipe writes it: non-gated experts (``up_proj`` and
    ``down_proj``, no ``gate_proj``), a shared expert, the router in BF16 with its ``e_score_correction_bias``."""
    prefix = "backbone.layers.1.mixer"
    tensors = [bf16(f"{prefix}.gate.weight", 2, 64), Tensor(f"{prefix}.gate.e_score_correction_bias", "F32", [2])]
    for expert in ("experts.0", "experts.1", "shared_experts"):
        tensors += ct_module(f"{prefix}.{expert}.up_proj") + ct_module(f"{prefix}.{expert}.down_proj", columns=32)
    tensors += ct_module("backbone.layers.0.mixer.in_proj") + ct_module("backbone.layers.0.mixer.out_proj")
    ignore = ("lm_head", "re:visual.*", "re:.*vision_tower.*", "re:.*multi_modal_projector.*")
    return Replica({"model.safetensors": tensors}, ct_config("NemotronHForCausalLM", ignore=ignore))


def _flux2_mixed() -> Replica:
    """BFL's FLUX.2 NVFP4 mixed checkpoint: one file, no config.json, ModelOpt names, W4A4 MLPs and BF16
    single-block attention."""
    tensors = [bf16("single_blocks.0.linear1.weight", 96, 64)]
    for mlp in ("img_mlp", "txt_mlp"):
        tensors += modelopt_module(f"double_blocks.0.{mlp}.0", rows=64, activation=1 / 160)
        tensors += modelopt_module(f"double_blocks.0.{mlp}.2", columns=64, activation=1 / 150)
    return Replica({"flux2-dev-nvfp4-mixed.safetensors": tensors}, None, target="flux2-dev-nvfp4-mixed.safetensors")


REPORTED: tuple[ReportedFailure, ...] = (
    ReportedFailure(
        "vllm-54974-modelopt-gate-up-scale-2-differ",
        "https://github.com/vllm-project/vllm/issues/54974",
        "vLLM",
        "A ModelOpt NVFP4 MoE whose experts' w1 (gate) and w3 (up) `weight_scale_2` differ: vLLM warns "
        "`w1_weight_scale_2 must match w3_weight_scale_2`, keeps w1's for the fused w13 (`[:, 0]`), and the up half "
        "dequantizes with the gate's scale.",
        "The checkpoint's fused partners differ; the thread's analysis holds for any ModelOpt MoE.",
        "expert 1's `up_proj.weight_scale_2` twice its `gate_proj`'s",
        _modelopt_moe,
        _set("model.layers.0.mlp.experts.1.up_proj.weight_scale_2", 2 / 2688),
        Caught({"NV303": "error"}, "model.layers.0.mlp.experts.1.up_proj.weight_scale_2"),
    ),
    ReportedFailure(
        "vllm-45212-modelopt-expert-input-scale-missing",
        "https://github.com/vllm-project/vllm/issues/45212",
        "vLLM",
        "A ModelOpt NVFP4 MoE missing `input_scale` for experts calibration never activated: vLLM leaves the slots at "
        "zero, inverts them to Inf, and every token routed there gives NaN (pad tokens, prompt-dependent).",
        "The shards lack the W4A4 experts' input scales; the declaration quantizes activations.",
        "expert 1's three `input_scale` tensors removed",
        _modelopt_moe,
        _remove(*(f"model.layers.0.mlp.experts.1.{p}.input_scale" for p in _MLP)),
        Caught({"NV202": "error"}, "model.layers.0.mlp.experts.1.down_proj.input_scale"),
    ),
    ReportedFailure(
        "compressed-tensors-595-inf-input-global-scale",
        "https://github.com/vllm-project/compressed-tensors/pull/595",
        "compressed-tensors",
        "Qwen3.5-397B-A17B quantized to NVFP4 by llm-compressor: 14 of 92,400 `input_global_scale` tensors are Inf, "
        "in the `down_proj` of rarely activated experts whose calibration activations were all zero (`generate_gparam` "
        "divides by an amax of 0); vLLM's output turns NaN.",
        "A divisor of Inf: the expert's activations are quantized to zero and its output is NaN.",
        "expert 1's `down_proj.input_global_scale` set to +Inf",
        lambda: _ct_moe("model.language_model.layers.0", "Qwen3_5MoeForConditionalGeneration"),
        _set(f"{_QWEN3_5_EXPERT}.down_proj.input_global_scale", float("inf")),
        Caught({"NV301": "error"}, f"{_QWEN3_5_EXPERT}.down_proj.input_global_scale"),
    ),
    ReportedFailure(
        "vllm-45102-lm-head-quantized-but-excluded",
        "https://github.com/vllm-project/vllm/issues/45102",
        "vLLM",
        "nvidia/Qwen3.6-35B-A3B-NVFP4 ships `lm_head` as NVFP4 (`weight`, `weight_scale`, `weight_scale_2`, "
        "`input_scale`) while hf_quant_config.json's `exclude_modules` lists `lm_head*`: vLLM builds it unquantized "
        "and refuses `There is no module or parameter named 'lm_head.input_scale'`.",
        "The declaration leaves out a module the shards quantize (PR #45132 honours the exclusion).",
        "`lm_head` stored as NVFP4 under `exclude_modules: [lm_head*]`",
        lambda: _modelopt_moe(lm_head="lm_head*"),
        _quantized_lm_head,
        Caught({"NV601": "error"}, "lm_head.weight"),
    ),
    ReportedFailure(
        "modelopt-868-fp8-weights-under-nvfp4",
        "https://github.com/NVIDIA/Model-Optimizer/issues/868",
        "ModelOpt",
        "`export_hf_checkpoint` of an NVFP4-quantized 8B model wrote 224 `float8_e4m3fn` weights instead of packed "
        "`uint8` (6.12 bits per parameter) under an NVFP4 declaration.",
        "Each weight is unpacked FP8 of the full width where NVFP4 needs packed U8 of half the width.",
        "every projection's `weight` F8_E4M3 of shape (rows, columns) instead of U8 (rows, columns / 2)",
        lambda: _modelopt_dense("LlamaForCausalLM"),
        _fp8_weights,
        Caught({"NV401": "error", "NV402": "error"}, "model.layers.0.self_attn.q_proj.weight"),
    ),
    ReportedFailure(
        "vllm-50610-transposed-nvfp4-weights",
        "https://github.com/vllm-project/vllm/pull/50610",
        "vLLM",
        "AxionML/Gemma-4-12B-NVFP4 (ModelOpt) stores its packed weights as (in_features / 2, out_features): "
        "`flashinfer_scaled_fp4_mm` asserts `a.shape[1] == b.shape[1]` on SM120 (issue #50577).",
        "The packed weights are transposed against their group scales (out_features, in_features / 16).",
        "every packed `weight` transposed",
        lambda: _modelopt_dense("Gemma4ForConditionalGeneration", "model.language_model", rows=48),
        _transposed,
        Caught({"NV401": "error"}, "model.language_model.layers.0.self_attn.q_proj.weight_scale"),
    ),
    ReportedFailure(
        "modelopt-2038-half-group-scales",
        "https://github.com/NVIDIA/Model-Optimizer/pull/2038",
        "ModelOpt",
        "The unified HF export of already-compressed NVFP4 weights (`--low_memory_mode`) wrote `weight_scale` of half "
        "the size: TinyLlama's `q_proj` weight (2048, 1024) U8 with a (2048, 64) scale where (2048, 128) is needed.",
        "Group scales for groups of 32 where the weight is packed for groups of 16.",
        "every `weight_scale` of half its width",
        lambda: _modelopt_dense("LlamaForCausalLM"),
        _half_group_scales,
        Caught({"NV401": "error"}, "model.layers.0.self_attn.q_proj.weight_scale"),
    ),
    ReportedFailure(
        "vllm-42601-denormal-expert-input-scales",
        "https://github.com/vllm-project/vllm/pull/42601",
        "vLLM",
        "txn545/Qwen3.5-122B-A10B-NVFP4 has near-zero or denormal float32 activation scales for dead MoE experts; "
        "`make_nvfp4_moe_quant_config` inverts them to Inf and the FP4 kernel turns the batch NaN.",
        "The scales are positive and finite, but below 1 / 3.4e38: their float32 reciprocal, which vLLM takes, is "
        "Inf, as an input scale of 0 gives, whatever their siblings hold (the replica's layer has two experts, too "
        "few for siblings to show which is odd). The publisher's other export of the family (SGLang #19587) holds "
        "ModelOpt's names; the replica takes them.",
        "expert 1's three `input_scale` values 1e-40 (denormal) among siblings of 1/448",
        lambda: _modelopt_moe("model.language_model.layers.0", "Qwen3_5MoeForConditionalGeneration"),
        _denormal_input_scales,
        Caught({"NV301": "error"}, f"{_QWEN3_5_EXPERT}.down_proj.input_scale"),
    ),
    ReportedFailure(
        "sglang-23625-flux2-missing-input-scales",
        "https://github.com/sgl-project/sglang/pull/23625",
        "SGLang",
        "FLUX.2-dev-NVFP4 gave pure-white images: `flux2-dev-nvfp4-mixed.safetensors` omits 16 `input_scale` "
        "tensors of FP4 `txt_mlp` layers, which the runtime then quantizes with 1.0 where calibration gave about "
        "146 to 171.",
        "W4A4 modules without their input scales in a diffusion checkpoint that ships as one file, without a "
        "config.json to declare W4A4; their `img_mlp` siblings have theirs.",
        "the `txt_mlp` modules' `input_scale` tensors removed",
        _flux2_mixed,
        _remove("double_blocks.0.txt_mlp.0.input_scale", "double_blocks.0.txt_mlp.2.input_scale"),
        Caught({"NV202": "error"}, "double_blocks.0.txt_mlp.0.input_scale"),
    ),
    ReportedFailure(
        "modelopt-1858-router-not-excluded",
        "https://github.com/NVIDIA/Model-Optimizer/pull/1858",
        "ModelOpt",
        "A Qwen3-30B-A3B NVFP4 export made with transformers 5 leaves the BF16 MoE router (`mlp.gate`, a `TopKRouter` "
        "with no quantizer) out of `exclude_modules`: vLLM and SGLang build it as packed FP4 and refuse "
        "`Tried to load weights of size [128, 2048] to a parameter of size [128, 1024]`.",
        "`quant_algo: NVFP4` over every linear layer not excluded contradicts a BF16 router's weight.",
        "the router dropped from `exclude_modules`",
        _modelopt_moe,
        _router_not_excluded,
        Caught({"NV611": "error"}, "model.layers.0.mlp.gate.weight"),
    ),
    ReportedFailure(
        "vllm-46264-fp8-kv-cache-v-scale-only",
        "https://github.com/vllm-project/vllm/issues/46264",
        "vLLM",
        "A checkpoint with an FP8 KV cache that provides `v_scale` but no `k_scale` fails to load: "
        "`BaseKVCacheMethod.process_weights_after_loading` asserts `layer.k_scale > 0.0`.",
        "The declared KV-cache quantization is half served by the tensors: an attention layer has one of its two "
        "scales.",
        "an NVFP4 checkpoint with `kv_cache_quant_algo: FP8` whose `k_proj.k_scale` is removed, `v_proj.v_scale` kept",
        lambda: _with_fp8_kv_cache(_modelopt_moe()),
        _remove("model.layers.0.self_attn.k_proj.k_scale"),
        Caught({"NV610": "error"}, "model.layers.0.self_attn.v_proj.v_scale"),
    ),
    ReportedFailure(
        "tensorrt-llm-16867-gemma4-k-eq-v",
        "https://github.com/NVIDIA/TensorRT-LLM/issues/16867",
        "TensorRT-LLM",
        "A ModelOpt NVFP4 Gemma 4 with `attention_k_eq_v: true`: TensorRT-LLM's HF weight mapper synthesizes the "
        "missing `v_proj` weights from `k_proj` but not their NVFP4 scales, and its fused-QKV loader fails "
        "`KeyError: 'v'`.",
        "The checkpoint is as the architecture defines it (full-attention layers have no `v_proj`): the mapper's bug.",
        "",
        _gemma4_k_eq_v,
        None,
        None,
    ),
    ReportedFailure(
        "tensorrt-llm-17188-scale-only-shards",
        "https://github.com/NVIDIA/TensorRT-LLM/pull/17188",
        "TensorRT-LLM",
        "The NVFP4 unified-HF load hook (AutoDeploy) required each module's packed weight in the same state-dict shard "
        "as its scales, and failed on shards that hold only scales (issue #11541).",
        "Where a writer puts a module's tensors is free: the index names each; the hook's bug.",
        "",
        _scale_only_shards,
        None,
        None,
    ),
    ReportedFailure(
        "sglang-19587-qwen3-5-linear-attention-nvfp4",
        "https://github.com/sgl-project/sglang/issues/19587",
        "SGLang",
        "txn545/Qwen3.5-27B-NVFP4 (ModelOpt) quantizes the Gated-DeltaNet projections; SGLang built them unquantized "
        "and refused `Parameter model.layers.0.linear_attn.in_proj_a.input_scale not found in params_dict`.",
        "The declaration excludes nothing the shards quantize: `Qwen3_5LinearDecoderLayer` forced `quant_config=None` "
        "for every `modelopt_fp4` checkpoint (since PR #18937, for NVIDIA's export, whose attention is BF16; PR #31220 "
        "reads `exclude_modules` instead).",
        "",
        _qwen3_5_linear_attention,
        None,
        None,
    ),
    ReportedFailure(
        "sglang-22287-qwen3-5-bf16-linear-attention-dropped",
        "https://github.com/sgl-project/sglang/issues/22287",
        "SGLang",
        "RedHatAI/Qwen3.5-35B-A3B-NVFP4 and -122B-A10B-NVFP4 (llm-compressor) produce garbage and a CUDA assertion in "
        "`torch.multinomial`: the BF16 weights of every `linear_attn` (Gated-DeltaNet) layer are silently dropped. "
        "Their `ignore` lists 635 entries, 270 of them `linear_attn`; `Qwen3_5LinearDecoderLayer` builds the layer "
        "unquantized only for `modelopt_fp4` (PR #22618 extends it).",
        "The checkpoint declares what it stores (BF16 projections, each ignored by name): SGLang's guard.",
        "",
        _qwen3_5_moe_bf16_linear_attention,
        None,
        None,
    ),
    ReportedFailure(
        "sglang-31827-minimax-m3-mixed-mxfp8",
        "https://github.com/sgl-project/sglang/issues/31827",
        "SGLang",
        "nvidia/MiniMax-M3-NVFP4 (MIXED_PRECISION: NVFP4 routed experts, MXFP8 elsewhere) failed to load: the "
        "fused MoE fell back to `UnquantizedFusedMoEMethod` (6144 vs 3072) and MXFP8 linear scales were dropped; "
        "PR #31989 added the `modelopt_mixed` MXFP8 layers.",
        "Every quantized module is listed in `quantized_layers` with the tensors its algorithm writes.",
        "",
        _minimax_m3_mixed,
        None,
        None,
    ),
    ReportedFailure(
        "sglang-31224-fp8-kv-scales-warning",
        "https://github.com/sgl-project/sglang/issues/31224",
        "SGLang",
        "With `--kv-cache-dtype fp8_e4m3`, SGLang warns `Using FP8 KV cache but no scaling factors provided` although "
        "the ModelOpt checkpoint's per-layer `k_scale`/`v_scale` are present and loaded.",
        "The warning is gated on `--quantization-param-path` alone: a log message, not the checkpoint.",
        "",
        lambda: _with_fp8_kv_cache(_modelopt_moe()),
        None,
        None,
    ),
    ReportedFailure(
        "modular-6697-compressed-tensors-nvfp4-unparsed",
        "https://github.com/modular/modular/issues/6697",
        "modular",
        "MAX recognizes NVFP4 only in ModelOpt's layout: RedHatAI/gemma-4-26B-A4B-it-NVFP4 (compressed-tensors, "
        "`config_groups`, `weight_packed`/`weight_global_scale`, BF16 `lm_head`) does not load.",
        "A complete compressed-tensors NVFP4 checkpoint: MAX's parser lacks the format.",
        "",
        lambda: _ct_moe(
            "model.language_model.layers.0", "Gemma4ForConditionalGeneration", ignore=("lm_head", "re:.*vision.*")
        ),
        None,
        None,
    ),
    ReportedFailure(
        "compressed-tensors-642-transformers-load-regression",
        "https://github.com/vllm-project/compressed-tensors/issues/642",
        "compressed-tensors",
        "kaitchup/Qwen3-0.6B-NVFP4 loaded with compressed-tensors 0.14.0 and failed on its main branch, in "
        "transformers' `from_pretrained` (`compress_model` on the empty skeleton, `nvfp4/base.py`).",
        "The same files load with the release before: the regression is in the loader.",
        "",
        lambda: _ct_dense("Qwen3ForCausalLM"),
        None,
        None,
    ),
    ReportedFailure(
        "nemo-rl-2983-modelopt-moe-input-scale-slot",
        "https://github.com/NVIDIA-NeMo/RL/pull/2983",
        "NeMo-RL",
        "NeMo-RL replaces the `input_scale` branch of vLLM 0.20's `FusedMoE.weight_loader` for ModelOpt NVFP4 MoE "
        "rollouts: its `_load_single_value` writes `param.data[expert_id]` and clobbers the gate/up (w1/w3) slot.",
        "The checkpoint's gate and up input scales are what ModelOpt writes; the loader loses one.",
        "",
        _modelopt_moe,
        None,
        None,
    ),
    ReportedFailure(
        "llm-compressor-1643-nvfp4a4-on-sm120",
        "https://github.com/vllm-project/llm-compressor/issues/1643",
        "llm-compressor",
        "Qwen3-4B quantized with llm-compressor's NVFP4 (W4A4) example does not load in vLLM 0.9.2 on an RTX 5090 "
        "while NVFP4A16 does; a maintainer: vLLM had no NVFP4A4 support for SM120 yet.",
        "A complete W4A4 checkpoint: the kernel was missing for the GPU.",
        "",
        lambda: _ct_dense("Qwen3ForCausalLM"),
        None,
        None,
    ),
    ReportedFailure(
        "vllm-31782-nemotron-h-non-gated-moe",
        "https://github.com/vllm-project/vllm/issues/31782",
        "vLLM",
        "Firworks/NVIDIA-Nemotron-3-Nano-30B-A3B-nvfp4, quantized by llm-compressor's NVFP4 recipe, fails to "
        "initialize: vLLM's fused MoE allowed a non-gated MoE (`is_act_and_mul=False`) only for ModelOpt NVFP4 "
        "(PR #32257 pipes it to compressed-tensors).",
        "The experts are as Nemotron-H defines them (no `gate_proj`, so no fused partner): vLLM's restriction.",
        "",
        _nemotron_h_non_gated,
        None,
        None,
    ),
    ReportedFailure(
        "sglang-40022-nvfp4a16-before-blackwell",
        "https://github.com/sgl-project/sglang/pull/40022",
        "SGLang",
        "On GPUs before Blackwell every compressed-tensors NVFP4 checkpoint fails at scheme construction, before "
        "weight loading: W4A4 with `Current platform does not support w4a4 nvfp4 quantization`, NVFP4A16 with an "
        "`ImportError` about `W4A16Sparse24` (`_is_wNa16_group_channel` never checks the type is INT).",
        "A complete weight-only checkpoint (no input global scales, `input_activations: null`): SGLang's dispatch.",
        "",
        lambda: _ct_dense("Qwen3ForCausalLM", activations=False),
        None,
        None,
    ),
)
"""The corpus, in the order docs/reported-failures.md gives it: the defects caught, the known misses, the
consumers' bugs."""


def described(replica: Replica) -> str:
    """One line of what a replica holds: its class, tensors, files and declaration."""
    count = sum(map(len, replica.shards.values()))
    files = ", ".join(f"`{name}`" for name in replica.shards)
    index = " and an index" if replica.index or len(replica.shards) > 1 else ""
    if replica.config is None:
        return f"{count} tensors in {files}, no config.json"
    architecture = replica.config["architectures"][0]
    quantization = replica.config.get("quantization_config")
    if quantization is not None:
        group = next(iter(quantization["config_groups"].values()))
        scheme = "W4A4" if group["input_activations"] else "weight-only"
        declared = f"config.json (`{quantization['quant_method']}`, `{quantization['format']}`, {scheme})"
    else:
        assert replica.modelopt is not None
        declared = f"hf_quant_config.json (`quant_algo: {replica.modelopt['quantization']['quant_algo']}`)"
    return f"`{architecture}`: {count} tensors in {files}{index}, declared by {declared}"


def document() -> str:
    """docs/reported-failures.md, from :data:`REPORTED`."""
    caught = [case for case in REPORTED if isinstance(case.expected, Caught)]
    missed = [case for case in REPORTED if isinstance(case.expected, Miss)]
    clean = [case for case in REPORTED if case.expected is None]
    defects = len(caught) + len(missed)
    lines = [
        "# Reported failures: the corpus of user threads",
        "",
        "Generated from `scalar_scales_testkit.reported.REPORTED` by `scripts/reported_failures.py`; the test "
        "command fails where this file differs (tests/base/doctor/test_reported_failures.py).",
        "",
        f"{len(REPORTED)} public threads (none of those issue 41 names), each rebuilt as a tiny replica: the thread's "
        "tensor names, dtypes, shapes and declarations (config.json, hf_quant_config.json), a few modules of a few "
        "rows, and exactly the thread's defect, written as safetensors files. Each defect's replica has a control, "
        "the same replica without the defect, and `scalar-scales check` must find nothing in it. compressed-tensors "
        "replicas are written as `scalar-scales migrate` leaves them (0-D global scales, `format_version` 2), so "
        "that NV101, which every llm-compressor checkpoint has, does not stand among a defect's findings.",
        "",
        f"- {len(caught)} defects `check` finds, with the rule and severity given;",
        *(
            [
                f"- {len(missed)} it misses, each of a class no rule covers yet: each is a test expected to fail, "
                "strictly, so that the run fails once a rule finds the defect, and the row is then one of the caught;"
            ]
            if missed
            else []
        ),
        f"- {len(clean)} consumers' bugs, with no defect in the checkpoint: `check` finds nothing.",
        "",
        f"That is {defects * 2 + len(clean)} cases: {defects} defects, {defects} controls, {len(clean)} clean "
        "replicas.",
        "",
        "| case | project | verdict |",
        "|---|---|---|",
    ]
    lines += [f"| [{case.id}]({case.thread}) | {case.project} | {case.verdict} |" for case in REPORTED]
    for title, cases in (
        ("Defects check finds", caught),
        ("Defects check misses", missed),
        ("Consumers' bugs", clean),
    ):
        if not cases:
            continue
        lines += ["", f"## {title}"]
        for case in cases:
            lines += ["", f"### {case.id}", "", f"Thread: <{case.thread}> ({case.project}).", ""]
            lines += [f"- **The thread shows:** {case.shows}", f"- **Inferred:** {case.inferred}"]
            lines.append(f"- **The replica:** {described(case.replica())}.")
            if case.defect is not None:
                lines.append(f"- **The replica's edit:** {case.edit}.")
            lines.append(f"- **`check`:** {case.verdict}.")
            if isinstance(case.expected, Miss):
                named = f"`{case.expected.names}`" if case.expected.names else "any tensor or the config"
                lines.append(f"- **Once a rule covers it:** a finding of at least {case.expected.severity} on {named}.")
    return "\n".join(lines) + "\n"
