"""The rules that hold what the config declares against what the shards hold (NV6).

The checkpoint's modules are taken stock of once
(:attr:`CheckpointView.classified`): those with a packed FP4 weight (NVFP4),
those quantized another way, and unquantized linear layers, each classified
against the declaration (:mod:`.matching`). A module stored one way where
the config says another is a finding: quantized but excluded (NV601),
quantized but not targeted (NV602), targeted but stored unquantized (NV603),
an input scale stored for a weight-only compressed-tensors group (NV604;
vLLM's ModelOpt weight-only methods register one and drop it). The
KV-cache scales (NV605, NV606) and NVFP4 modules a config does not declare
(NV607) are judged on the whole checkpoint, and so is a declaration whose
fields contradict each other where the engines branch on them (NV608, NV609),
an attention layer that holds one of the two KV-cache scales the declaration
asks for (NV610), and a ModelOpt declaration that quantizes a router its
shards hold unquantized (NV611). A ModelOpt export declares its
quantization twice, and the two files' disagreeing is NV612. A
compressed-tensors group whose format is NVFP4's and whose weights'
arguments are not is NV613.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from scalar_scales.doctor.examples import (
    AddScales,
    DeclareElsewhere,
    DeclareGroupSize,
    DeclareKVCache,
    DeclareWeights,
    DropDeclaration,
    Example,
    IgnoreLayer,
    RemoveEvery,
    TargetOnlyLayer,
    Unexclude,
    Unquantize,
    WeightOnly,
)
from scalar_scales.doctor.matching import ROUTER_NAMES, Kind, Verdict
from scalar_scales.doctor.module_rules import weight_scale_shape
from scalar_scales.doctor.rules import Found, checkpoint_rule
from scalar_scales.doctor.view import CheckpointView
from scalar_scales.files.header import ending_with
from scalar_scales.nvfp4 import COMPRESSED_TENSORS, GROUP_SIZE, MODELOPT
from scalar_scales.sources.declaration import exclusions, kv_cache_algorithm

__all__ = [
    "algorithm_contradicts_groups",
    "declaration_files_disagree",
    "format_contradicts_arguments",
    "input_scale_for_weight_only",
    "kv_scale_unpaired",
    "kv_scales_missing",
    "kv_scales_undeclared",
    "nvfp4_group_size",
    "nvfp4_undeclared",
    "quantized_but_ignored",
    "quantized_but_not_targeted",
    "router_not_excluded",
    "targeted_but_not_nvfp4",
]


_KV_SCALES = ("model.layers.0.self_attn.k_scale", "model.layers.0.self_attn.v_scale")
"""The KV-cache scales NV606's example stores: those of the first layer's attention."""


def _modules(checkpoint: CheckpointView, kind: Kind) -> Iterator[tuple[str, Verdict]]:
    classified = checkpoint.classified
    return zip(classified.modules[kind], classified.verdicts[kind], strict=True)


def _file_of(checkpoint: CheckpointView, tensor: str) -> str:
    return checkpoint.file_of(checkpoint.position[tensor])


@checkpoint_rule(
    "NV601",
    "quantized-but-ignored",
    "error",
    "load-error",
    summary="an NVFP4 module the config leaves unquantized",
    needs=("nvfp4", "quantization"),
    judges_classes=True,
    examples=(
        Example(
            "quantized-layer-ignored",
            "a layer stored as NVFP4 that the config leaves unquantized, as MTP layers are (vLLM #43304)",
            (IgnoreLayer(1),),
            names="{module}.down_proj.{weight}",
        ),
    ),
    explanation="""
        A module stored as NVFP4 that the config's `ignore`
        (ModelOpt's hf_quant_config.json: `exclude_modules`) leaves unquantized. vLLM builds it unquantized
        and finds no parameter for its tensors: `Layer model.layers.1.mlp.experts has
        no parameter 'w2_input_global_scale'`. This is how MTP layers fail when
        `ignore` keeps `re:.*mtp\\..*` unquantized and the shards quantize them (vLLM
        #43304, #44087).
        """,
)
def quantized_but_ignored(checkpoint: CheckpointView) -> Iterator[Found]:
    assert checkpoint.layout is not None  # needs: nvfp4
    declared = checkpoint.expectations.declared
    what = "ignore" if declared is None else declared.ignore_key
    for module, (_, ignored) in _modules(checkpoint, "nvfp4"):
        if ignored:
            tensor = f"{module}.{checkpoint.layout.weight}"
            mtp = " (an MTP layer: vLLM #43304, #44087)" if "mtp" in module.lower() else ""
            yield (
                tensor,
                _file_of(checkpoint, tensor),
                f"stored as NVFP4, but the config's {what} leaves the module unquantized{mtp}",
                "vLLM builds it unquantized and finds no weight of that name (observed: the engine does not start)",
            )


@checkpoint_rule(
    "NV602",
    "quantized-but-not-targeted",
    "error",
    "load-error",
    summary="an NVFP4 module no NVFP4 config group targets",
    needs=("nvfp4", "quantization"),
    judges_classes=True,
    examples=(
        Example(
            "quantized-layer-untargeted",
            "a layer stored as NVFP4 that no NVFP4 group targets: compressed-tensors' groups target layer 0 alone, "
            "ModelOpt's MIXED_PRECISION lists layer 0's modules alone",
            (TargetOnlyLayer(0),),
            names="{module}.down_proj.{weight}",
        ),
    ),
    explanation="""
        A module stored as NVFP4 that no NVFP4 config group
        targets (ModelOpt MIXED_PRECISION: that `quantized_layers` does not list).
        vLLM builds it unquantized, as for NV601.
        """,
)
def quantized_but_not_targeted(checkpoint: CheckpointView) -> Iterator[Found]:
    assert checkpoint.layout is not None  # needs: nvfp4
    for module, (groups, ignored) in _modules(checkpoint, "nvfp4"):
        if not groups and not ignored:
            tensor = f"{module}.{checkpoint.layout.weight}"
            yield (
                tensor,
                _file_of(checkpoint, tensor),
                "stored as NVFP4, but no NVFP4 config group targets the module",
                "vLLM builds it unquantized and finds no weight of that name (observed: the engine does not start)",
            )


@checkpoint_rule(
    "NV603",
    "targeted-but-not-nvfp4",
    "error",
    "load-error",
    summary="a module an NVFP4 group targets, stored otherwise",
    needs=("nvfp4", "quantization"),
    judges_classes=True,
    elsewhere={MODELOPT: "nan-output"},
    examples=(
        Example(
            "targeted-layer-unquantized",
            "a linear layer the NVFP4 group targets, stored in BF16 as a quantizer that skipped it writes it: layer "
            "0's attention output projection where the checkpoint has one, else an expert's down projection",
            (Unquantize(("model.layers.0.self_attn.o_proj", "model.layers.0.mlp.experts.0.down_proj")),),
        ),
    ),
    explanation="""
        A linear module an NVFP4 group targets, stored
        unquantized (or quantized another way): vLLM builds it as NVFP4. In
        compressed-tensors' layout it finds a `weight` it has no parameter for,
        and does not start. ModelOpt names its packed FP4 weight `weight` too, so
        vLLM loads the stored weight's bytes as FP4 values and finds no scales for
        them: NaN output. `lm_head` is not judged: vLLM never quantizes it
        under compressed-tensors (whose `get_quant_method` quantizes linear
        layers, and `lm_head` is an embedding's `ParallelLMHead`); under
        ModelOpt it builds one the exclusions do not name as NVFP4
        (`ModelOptQuantConfigBase.get_quant_method`, read), but what it then
        does with a BF16 one is not observed, and the rule claims no effect it
        has not seen.
        """,
)
def targeted_but_not_nvfp4(checkpoint: CheckpointView) -> Iterator[Found]:
    effect = (
        "loads its stored weight's bytes as FP4 values (observed for an unquantized one: NaN output)"
        if checkpoint.layout is not None and checkpoint.layout.weight_named_plainly
        else "finds no NVFP4 tensor for it (observed: the engine does not start)"
    )
    stored: tuple[tuple[Kind, str], ...] = (
        ("quantized", "quantized another way (its weight is not FP4)"),
        ("linear", "unquantized"),
    )
    for kind, how in stored:
        for module, (groups, ignored) in _modules(checkpoint, kind):
            if groups and not ignored and not module.endswith("lm_head"):
                tensor = f"{module}.weight"
                yield (
                    tensor,
                    _file_of(checkpoint, tensor),
                    f"the NVFP4 config group {groups[0].name} targets this module, but it is stored {how}",
                    f"vLLM builds it as NVFP4 and {effect}",
                )


@checkpoint_rule(
    "NV604",
    "input-scale-for-weight-only",
    "error",
    "load-error",
    summary="an input scale stored for a weight-only group",
    needs=("nvfp4", "quantization"),
    judges_classes=True,
    producers=frozenset({COMPRESSED_TENSORS}),
    examples=(
        Example(
            "weight-only-with-input-scales",
            "a weight-only (NVFP4A16) config group whose modules still carry input global scales",
            (WeightOnly(),),
            names="{module}.down_proj.{input_global}",
        ),
    ),
    explanation="""
        An `input_global_scale` stored for a module whose
        compressed-tensors config group is weight-only (`input_activations: null`,
        NVFP4A16): vLLM has no parameter for it, and its fused QKV loader fails
        (`'QKVParallelLinear' object has no attribute 'data'`). Not applied to
        ModelOpt: its weight-only methods register an `input_scale` and drop it.
        """,
)
def input_scale_for_weight_only(checkpoint: CheckpointView) -> Iterator[Found]:
    layout, expectations = checkpoint.layout, checkpoint.expectations
    assert layout is not None  # needs: nvfp4
    if all(group.input_activations for group in expectations.nvfp4_groups):
        return
    verdict_of = dict(_modules(checkpoint, "nvfp4"))
    names = checkpoint.names
    for i in ending_with(names, f".{layout.input_global}"):
        module = names[i][: -len(layout.input_global) - 1]
        groups, ignored = verdict_of.get(module) or expectations.classify(module, "nvfp4")
        if groups and not ignored and not any(group.input_activations for group in groups):
            yield (
                names[i],
                checkpoint.file_of(i),
                f"stored, but the module's config group {groups[0].name} does not quantize activations (weight-only)",
                f"vLLM has no {layout.input_global} parameter for it (observed: the engine does not start)",
            )


@checkpoint_rule(
    "NV605",
    "kv-scales-missing",
    "error",
    "wrong-output",
    summary="a declared KV-cache quantization without k_scale/v_scale",
    needs=("nvfp4", "quantization"),
    examples=(Example("kv-scales-missing", "an FP8 KV cache declared, without its scales", (DeclareKVCache(),)),),
    explanation="""
        The config declares a quantized KV cache
        (`kv_cache_scheme`, ModelOpt's `kv_cache_quant_algo`), but no shard holds a
        `k_scale` or `v_scale`: vLLM starts and serves without them, and the toy
        generated other tokens. The finding names the config.
        """,
)
def kv_scales_missing(checkpoint: CheckpointView) -> Iterator[Found]:
    declared = checkpoint.expectations.declared
    if declared is not None and declared.kv_cache and not checkpoint.kv_scales:
        yield (
            None,
            declared.source or "config.json",
            "the config declares quantized KV-cache scales (kv_cache_scheme, kv_cache_quant_algo), but no shard holds "
            "a k_scale or v_scale",
            "vLLM starts and serves without them (observed: other tokens)",
        )


@checkpoint_rule(
    "NV606",
    "kv-scales-undeclared",
    "info",
    "none",
    summary="k_scale/v_scale stored without a KV-cache quantization",
    needs=("nvfp4", "quantization"),
    examples=(
        Example(
            "kv-scales-undeclared",
            "KV-cache scales stored, with no KV-cache quantization declared",
            (AddScales(_KV_SCALES, 1.0, beside="model.layers.0.mlp.experts.0.gate_proj.{weight}"),),
        ),
    ),
    explanation="""
        `k_scale`/`v_scale` tensors are stored, but the config
        declares no KV-cache quantization: vLLM serves the checkpoint as without them.
        """,
)
def kv_scales_undeclared(checkpoint: CheckpointView) -> Iterator[Found]:
    declared = checkpoint.expectations.declared
    if declared is not None and not declared.kv_cache and checkpoint.kv_scales:
        yield (
            None,
            declared.source or "config.json",
            f"{checkpoint.kv_scales} k_scale/v_scale tensors are stored, but the config declares no KV-cache "
            "quantization",
            "vLLM serves the checkpoint as without them (observed)",
        )


@checkpoint_rule(
    "NV607",
    "nvfp4-undeclared",
    "error",
    "load-error",
    summary="NVFP4 modules in the shards, no NVFP4 in the config",
    fix=(
        "put back the NVFP4 declaration the shards' producer wrote (compressed-tensors: config.json's "
        "quantization_config; ModelOpt: hf_quant_config.json, under a config.json without another "
        "quantization_config), from the checkpoint's source"
    ),
    needs=("nvfp4", "config"),
    examples=(
        Example(
            "quantization-undeclared",
            "NVFP4 shards under a config that declares no quantization (the declaration dropped in a re-save)",
            (DropDeclaration(),),
        ),
    ),
    explanation="""
        The shards hold NVFP4 modules, in either layout, but the
        config declares no NVFP4 (no `quantization_config` and no
        `hf_quant_config.json`, or another method): vLLM builds every module
        unquantized.
        """,
)
def nvfp4_undeclared(checkpoint: CheckpointView) -> Iterator[Found]:
    declared, layout = checkpoint.scan.declared, checkpoint.layout
    if declared is None or declared.is_nvfp4 or layout is None:
        return
    modules = sum(n for (_, kind), n in checkpoint.module_counts.items() if kind == "nvfp4")
    says = f"declares {declared.format_name}" if declared.format_name else "declares no quantization"
    yield (
        None,
        declared.source or "config.json",
        f"the shards hold {modules} NVFP4 modules in the {layout.producer} layout, but the config {says}",
        "vLLM builds those modules unquantized and finds no weight of the names they have (observed: the engine does "
        "not start)",
    )


@checkpoint_rule(
    "NV608",
    "algorithm-contradicts-groups",
    "error",
    "wrong-output",
    summary="quant_algo NVFP4 (W4A4) over config groups that are all weight-only",
    fix=(
        "make the declaration say one thing: quant_algo W4A16_NVFP4 where the shards hold no input_scale "
        "(weight-only), else each config group's input_activations (W4A4), as ModelOpt writes them"
    ),
    needs=("nvfp4", "quantization"),
    producers=frozenset({MODELOPT}),
    examples=(
        Example(
            "modelopt-weight-only-groups",
            "quant_algo NVFP4 over config groups that all say input_activations: null, and no input_scale in the "
            "shards, as the checkpoint of vLLM #54189 is",
            (WeightOnly(), RemoveEvery("{input_global}")),
        ),
        Example(
            "modelopt-weight-only-groups-with-input-scales",
            "quant_algo NVFP4 over config groups that all say input_activations: null, the shards holding W4A4's "
            "input scales",
            (WeightOnly(),),
        ),
    ),
    explanation="""
        A ModelOpt config whose `quant_algo` is `NVFP4`, ModelOpt's
        name for W4A4 (weights and activations in FP4; weight-only is
        `W4A16_NVFP4`), while every one of its `config_groups` says
        `input_activations: null` (weight-only). The engines resolve the
        contradiction differently, each from one side:

        - vLLM 0.32 and 0.33 read the groups (`ModelOptNvFp4Config._from_config`,
          since vLLM PR #54427) and serve it as `W4A16_NVFP4`: weight-only, any
          stored `input_scale` dropped.
        - vLLM 0.23 reads `quant_algo` alone and builds W4A4. Where the shards
          hold no `input_scale`, as in vLLM #54189, the activation scales it
          allocated (`torch.empty`) are never loaded, and
          `ModelOptNvFp4FusedMoE.process_weights_after_loading` folds that
          memory into the experts' alphas: #54189 saw 0.0 there, every expert
          zeroed, one token repeated, no error.
        - SGLang 0.5.23 reads `quant_algo` alone (`ModelOptFp4Config.from_config`)
          and builds W4A4; activation scales it does not load stay 1.0
          (`ModelOptNvFp4FusedMoEMethod.create_weights`, read).

        The finding names both sides and says which one the shards bear out
        (no `input_scale`: the groups; input scales: `quant_algo`). Each
        engine's reading is observed (tests/vllm_layers in vLLM 0.23, 0.32 and
        0.33; tests/sglang_loading); the zeroed experts are #54189's report.
        """,
)
def algorithm_contradicts_groups(checkpoint: CheckpointView) -> Iterator[Found]:
    declared, layout = checkpoint.expectations.declared, checkpoint.layout
    assert declared is not None and layout is not None  # needs: quantization, nvfp4
    if not declared.weight_only_groups:
        return
    held = checkpoint.nvfp4.members[layout.input_global]
    stored = len(held) - held.count(checkpoint.absent)
    groups = ", ".join(declared.weight_only_groups)
    if stored:
        tensors = f"the shards hold {stored} {layout.input_global} tensors, as W4A4 has"
        engines = (
            "vLLM 0.32 and 0.33 read the groups (PR #54427) and serve it weight-only (W4A16_NVFP4), dropping those "
            "input scales; vLLM 0.23 and SGLang 0.5.23 read quant_algo and serve W4A4 (observed: each engine's "
            "reading)"
        )
    else:
        tensors = f"no shard holds an {layout.input_global}, as weight-only has none"
        engines = (
            "vLLM 0.32 and 0.33 read the groups (PR #54427) and serve it weight-only (W4A16_NVFP4); vLLM 0.23 reads "
            "quant_algo and builds W4A4 over activation scales never loaded, uninitialised memory (vLLM #54189: every "
            "expert zeroed); SGLang 0.5.23 reads quant_algo too, its activation scales left at 1.0 (observed: each "
            "engine's reading)"
        )
    yield (
        None,
        declared.source or "config.json",
        f"quant_algo {declared.format_name} declares W4A4 (activations quantized), but config groups {groups} "
        f"all say input_activations: null (weight-only); {tensors}",
        engines,
    )


@checkpoint_rule(
    "NV609",
    "nvfp4-group-size",
    "error",
    "load-error",
    summary="an NVFP4 config group whose group size is not NVFP4's 16",
    fix="declare group_size 16 (compressed-tensors: each NVFP4 group's weights and input_activations), as NVFP4 is",
    needs=("nvfp4", "quantization"),
    examples=(
        Example(
            "nvfp4-groups-of-32",
            "NVFP4 declared with groups of 32 values (MXFP4's size), the tensors grouped by 16",
            (DeclareGroupSize(32),),
            alongside=(weight_scale_shape.code,),
        ),
    ),
    explanation="""
        An NVFP4 config group (compressed-tensors' `nvfp4-pack-quantized`,
        ModelOpt's `NVFP4` or `W4A16_NVFP4`) whose `group_size` is not 16:
        NVFP4 is FP4 values in blocks of 16, each with its FP8 scale, so the
        declaration contradicts its own format. The engines branch on it:

        - compressed-tensors: vLLM 0.23, 0.32 and 0.33 take a group for NVFP4
          only where its weights' group size is 16 (`_is_nvfp4_format`), and
          its input activations' too where it quantizes them, and
          refuse any other: its experts (observed: `Unsupported FusedMoe
          scheme`, tests/vllm_layers) and its linear layers (`No
          compressed-tensors compatible scheme was found`, the engine's start,
          docs/check-evidence.md); SGLang 0.5.23 tests the same
          (`CompressedTensorsConfig._is_fp4a4_nvfp4`, read).
        - ModelOpt: vLLM 0.23, 0.32 and 0.33 size the block scales for the
          declared group size (observed), and NVFP4's blocks of 16 do not
          load into them: the engine does not start.

        A checkpoint whose block scales are grouped by 16 also gets NV401 on
        every module (its tensors against the declared size); this rule names
        the config, where the contradiction is.
        """,
)
def nvfp4_group_size(checkpoint: CheckpointView) -> Iterator[Found]:
    declared = checkpoint.expectations.declared
    assert declared is not None  # needs: quantization
    compressed_tensors = declared.producer == COMPRESSED_TENSORS
    for group in declared.nvfp4_groups:
        sizes = {"weights.group_size" if compressed_tensors else "group_size": group.group_size}
        if compressed_tensors and group.input_activations:
            sizes["input_activations.group_size"] = group.input_group_size
        wrong = ", ".join(f"{key} {size}" for key, size in sizes.items() if size != GROUP_SIZE)
        if wrong:
            yield (
                None,
                declared.source or "config.json",
                f"the NVFP4 config group {group.name} ({group.format}) declares {wrong}, but NVFP4 is blocks of "
                f"{GROUP_SIZE} values",
                "vLLM refuses the group's modules (compressed-tensors: no NVFP4 scheme) or sizes their block scales "
                "for the declared size, into which NVFP4's blocks of 16 do not load (observed: the engine does not "
                "start)",
            )


_ONE_SCALE = {
    "v_scale": (
        "vLLM 0.23, 0.32 and 0.33 and SGLang 0.5.23 assert k_scale > 0 after loading, and an unloaded k_scale is -1.0 "
        "(BaseKVCacheMethod.process_weights_after_loading; vLLM #46264: the engine does not start)"
    ),
    "k_scale": (
        "vLLM 0.23, 0.32 and 0.33 and SGLang 0.5.23 take the larger of the two, the k_scale, for the values too "
        "(BaseKVCacheMethod.process_weights_after_loading, read): the values are quantized with the keys' range"
    ),
}
"""What the engines do with a ModelOpt attention layer holding only the KV-cache scale named."""


def _one_scale_consequence(producer: str | None, other: str) -> str:
    """What the engines do with an attention layer without its ``other`` KV-cache scale, in ``producer``'s layout:
    vLLM's compressed-tensors KV-cache method starts both at 1.0 and keeps 1.0 for the one not loaded."""
    if producer == COMPRESSED_TENSORS:
        return (
            f"vLLM 0.23, 0.32 and 0.33 start each scale at 1.0 (CompressedTensorsKVCacheMethod.create_weights) and "
            f"keep 1.0 for the missing {other}: that cache is quantized with a scale of 1.0, not its calibrated one "
            "(observed: vLLM 0.32 serves other tokens)"
        )
    return _ONE_SCALE["k_scale" if other == "v_scale" else "v_scale"]


def _attention_of(module: str, projection: str) -> str:
    """The attention module a KV-cache scale belongs to: compressed-tensors writes ``self_attn.k_scale``,
    ModelOpt ``self_attn.k_proj.k_scale``."""
    return module.removesuffix(f".{projection}")


@checkpoint_rule(
    "NV610",
    "kv-scale-unpaired",
    "error",
    "wrong-output",
    summary="an attention layer with one of its two KV-cache scales",
    elsewhere={MODELOPT: "load-error"},
    fix="store both k_scale and v_scale for every attention layer (or neither), as the quantizer calibrated them",
    needs=("nvfp4", "quantization"),
    examples=(
        Example(
            "kv-v-scale-only",
            "an FP8 KV cache declared, and the first layer's attention holding a v_scale without its k_scale, as the "
            "checkpoint of vLLM #46264 does",
            (
                DeclareKVCache(),
                AddScales((_KV_SCALES[1],), 1.0, beside="model.layers.0.mlp.experts.0.gate_proj.{weight}"),
            ),
            names=_KV_SCALES[1],
        ),
    ),
    explanation="""
        The config declares a quantized KV cache (`kv_cache_scheme`,
        ModelOpt's `kv_cache_quant_algo`) and an attention layer holds one of
        its two scales, `k_scale` or `v_scale`, without the other (NV605
        is the case where no layer holds either). In ModelOpt's layout, vLLM
        0.23, 0.32 and 0.33 and SGLang 0.5.23 start each scale at -1.0 and
        resolve the pair in `BaseKVCacheMethod.process_weights_after_loading`:

        - a `v_scale` without its `k_scale`: `assert layer.k_scale > 0.0`
          fails, and the engine does not start (vLLM #46264);
        - a `k_scale` without its `v_scale`: the larger of the two, the
          `k_scale`, is taken for both, and the values are quantized with the
          keys' range (read, not observed).

        In compressed-tensors' layout, vLLM 0.23, 0.32 and 0.33 load the
        scales through `CompressedTensorsKVCacheMethod`, which starts each
        at 1.0 and keeps 1.0 for the one the layer lacks: that cache is
        quantized with a scale of 1.0, not the calibrated one, and the output
        changes (observed: vLLM 0.32 serves other tokens).

        The finding names the scale the layer holds.
        """,
)
def kv_scale_unpaired(checkpoint: CheckpointView) -> Iterator[Found]:
    declared = checkpoint.expectations.declared
    if declared is None or not declared.kv_cache or not checkpoint.kv_scales:
        return
    held = {
        leaf: {_attention_of(module, projection): i for module, i in checkpoint.ending_in(leaf).items()}
        for leaf, projection in (("k_scale", "k_proj"), ("v_scale", "v_proj"))
    }
    for leaf, other in (("k_scale", "v_scale"), ("v_scale", "k_scale")):
        for attention, i in held[leaf].items():
            if attention not in held[other]:
                yield (
                    checkpoint.names[i],
                    checkpoint.file_of(i),
                    f"the config declares a quantized KV cache, and {attention} has its {leaf} but no {other}",
                    _one_scale_consequence(declared.producer, other),
                )


_QUANTIZED_ROUTERS = {
    "Qwen3MoeForCausalLM": "vLLM 0.23, 0.32 and 0.33",
    "Qwen3VLMoeForConditionalGeneration": "vLLM 0.23, 0.32 and 0.33",
    "Lfm2MoeForCausalLM": "vLLM 0.23, 0.32 and 0.33",
    "ArcticForCausalLM": "vLLM 0.23",
    "K2HorizonForCausalLM": "vLLM 0.32 and 0.33",
}
"""The architectures whose MoE router vLLM builds with the checkpoint's quantization config, and the versions that
do (read: the model's ``self.gate = ReplicatedLinear(...)``/``GateLinear(...)`` given ``quant_config``; Qwen3-VL-MoE
builds Qwen3-MoE's block). The others build their router unquantized whatever the declaration says, as SGLang
0.5.23 builds Qwen3-MoE's (``Qwen3MoeSparseMoeBlock``: a quantization config for ModelSlim's alone)."""


@checkpoint_rule(
    "NV611",
    "router-not-excluded",
    "error",
    "load-error",
    summary="an unquantized MoE router that a ModelOpt declaration quantizes",
    fix=(
        "list the router in the declaration's exclusions (hf_quant_config.json's exclude_modules and config.json's "
        "ignore: `model.layers.*.mlp.gate`), as ModelOpt writes them since its PR #1858"
    ),
    needs=("nvfp4", "quantization"),
    producers=frozenset({MODELOPT}),
    examples=(
        Example(
            "router-not-excluded",
            "the MoE routers (`mlp.gate`, BF16) dropped from the exclusions of an NVFP4 declaration, as ModelOpt "
            "exported Qwen3-MoE under transformers 5 (ModelOpt PR #1858)",
            (Unexclude(".mlp.gate"),),
            names="model.layers.1.mlp.gate.weight",
        ),
    ),
    explanation="""
        A ModelOpt declaration of one algorithm (`quant_algo: NVFP4`)
        quantizes every linear module its exclusions (`exclude_modules`,
        config.json's `ignore`) do not name, and the shards hold a MoE
        router (`mlp.gate`, `router`) unquantized that they do not name.
        ModelOpt's exporter lists the modules it left unquantized, and a
        router that is not an `nn.Linear` (transformers 5's `TopKRouter`) is
        left out of the list (ModelOpt PR #1858). The engines that build the
        router with the quantization config build it as packed FP4 and refuse
        its weight: `Tried to load weights of size [128, 2048] to a parameter
        of size [128, 1024]`. Those are vLLM's Qwen3-MoE, Qwen3-VL-MoE and
        LFM2-MoE (0.23, 0.32 and 0.33), Arctic (0.23) and K2-Horizon (0.32,
        0.33), read in each model's MoE block. Observed for Qwen3-MoE's
        router (tests/vllm_layers): 0.32 and 0.33 build it as packed FP4 and
        refuse the BF16 weight, 0.23 builds it with the NVFP4 linear method
        too. Other architectures, and
        SGLang 0.5.23's Qwen3-MoE, build the router unquantized, and the rule
        finds nothing in a checkpoint of another architecture.
        """,
)
def router_not_excluded(checkpoint: CheckpointView) -> Iterator[Found]:
    config = checkpoint.scan.config or {}
    architectures = config.get("architectures")
    named = architectures if isinstance(architectures, list) else []
    architecture = next((a for a in named if isinstance(a, str) and a in _QUANTIZED_ROUTERS), None)
    declared = checkpoint.expectations.declared
    if architecture is None or declared is None:
        return
    weights = checkpoint.ending_in("weight")
    packed = set(checkpoint.nvfp4.bases)
    extra = checkpoint.ending_in("e_score_correction_bias")
    for module, i in weights.items():
        if module.rpartition(".")[2] not in ROUTER_NAMES or module in packed or module in extra:
            continue
        if len(checkpoint.shapes[i]) != 2 or checkpoint.dtypes[i] not in ("BF16", "F16", "F32"):
            continue
        groups, excluded = checkpoint.expectations.classify(module, "linear")
        if groups and not excluded:
            yield (
                checkpoint.names[i],
                checkpoint.file_of(i),
                f"the router is stored unquantized ({checkpoint.dtypes[i]}), but quant_algo {declared.format_name} "
                f"quantizes it: the config's {declared.ignore_key} does not name it",
                f"{_QUANTIZED_ROUTERS[architecture]} build {architecture}'s router as packed FP4 and refuse its weight "
                "(ModelOpt PR #1858: `Tried to load weights of size [128, 2048] to a parameter of size [128, 1024]`; "
                "observed for Qwen3-MoE's router in vLLM 0.32 and 0.33); SGLang 0.5.23 builds it unquantized (read)",
            )


def _layers(quantization: Mapping[str, Any]) -> dict[str, str] | None:
    layers = quantization.get("quantized_layers")
    if not isinstance(layers, Mapping):
        return None
    return {
        str(module): str(recipe.get("quant_algo")).upper() if isinstance(recipe, Mapping) else str(recipe)
        for module, recipe in layers.items()
    }


def _said(value: object) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, frozenset):
        return "[" + ", ".join(sorted(value)) + "]" if value else "[]"
    if isinstance(value, dict):
        return ", ".join(f"{module}: {algo}" for module, algo in sorted(value.items())) or "no layer"
    return str(value)


@checkpoint_rule(
    "NV612",
    "declaration-files-disagree",
    "warning",
    "none",
    summary="config.json and hf_quant_config.json declaring a ModelOpt quantization differently",
    fix=(
        "make the two files say the same: the one that matches the shards (its quant_algo, kv_cache_quant_algo, "
        "exclusions, group_size and quantized_layers) copied into the other, as ModelOpt's exporter writes both"
    ),
    needs=("nvfp4", "quantization"),
    producers=frozenset({MODELOPT}),
    examples=(
        Example(
            "declaration-files-disagree",
            "hf_quant_config.json declaring the weight-only W4A16_NVFP4 over the W4A4 export that config.json "
            "declares NVFP4, as a hand edit of one file leaves it",
            (DeclareElsewhere("quant_algo", "W4A16_NVFP4"),),
        ),
    ),
    explanation="""
        ModelOpt's exporter declares its quantization twice: config.json's
        `quantization_config` (`quant_method: modelopt`) and
        hf_quant_config.json's `quantization`. Where the two say different
        things in a field the engines branch on (`quant_algo`, the KV-cache
        algorithm, the exclusions, `group_size`, MIXED_PRECISION's
        `quantized_layers`), the checkpoint is two checkpoints, and which one
        is served depends on which file a consumer reads:

        - vLLM 0.23, 0.32 and 0.33 read config.json's `quantization_config`
          (`get_quant_config`), and hf_quant_config.json only without one, or
          where a MIXED_PRECISION config.json has no `quantized_layers`;
        - SGLang 0.5.23 reads config.json's too (`get_quant_config`, through
          `resolve_checkpoint_quant_spec`), and hf_quant_config.json where
          a MIXED_PRECISION config.json lacks `quantized_layers` or its
          KV-cache algorithm, and first of all for its `quark_mxfp4`
          requantization (read).

        The finding names the field and what each file says of it; the rules
        that judge the shards against the declaration judge them against the
        file vLLM reads.
        """,
)
def declaration_files_disagree(checkpoint: CheckpointView) -> Iterator[Found]:
    config, file = checkpoint.scan.config, checkpoint.scan.opened.modelopt_config
    served = (config or {}).get("quantization_config")
    other = (file or {}).get("quantization")
    if not isinstance(served, Mapping) or served.get("quant_method") != MODELOPT or not isinstance(other, Mapping):
        return
    location = checkpoint.scan.opened.location
    config_name, file_name = str(location.config or "config.json"), str(location.modelopt_config)
    fields: tuple[tuple[str, object, object], ...] = (
        ("quant_algo", str(served.get("quant_algo")).upper(), str(other.get("quant_algo")).upper()),
        ("the KV-cache algorithm", kv_cache_algorithm(served), kv_cache_algorithm(other)),
        ("the exclusions", frozenset(exclusions(served, "ignore")), frozenset(exclusions(other, "exclude_modules"))),
        ("group_size", served.get("group_size"), other.get("group_size")),
        ("quantized_layers", _layers(served), _layers(other)),
    )
    for name, says, said in fields:
        if name in ("group_size", "quantized_layers") and (says is None or said is None):
            continue  # stated in one file alone: the other's reading takes the same default or file
        if isinstance(says, dict) and isinstance(said, dict):
            differ = {module for module in says.keys() | said.keys() if says.get(module) != said.get(module)}
            says, said = ({m: a for m, a in layers.items() if m in differ} for layers in (says, said))
        if says != said:
            yield (
                None,
                config_name,
                f"{name}: config.json's quantization_config says {_said(says)}, {file_name.rpartition('/')[2]} "
                f"says {_said(said)}",
                "vLLM 0.23, 0.32 and 0.33 and SGLang 0.5.23 serve config.json's (get_quant_config, read); a consumer "
                "that reads hf_quant_config.json first (SGLang's quark_mxfp4 requantization, read) serves the "
                "other's",
            )


@checkpoint_rule(
    "NV613",
    "format-contradicts-arguments",
    "error",
    "load-error",
    summary="an nvfp4-pack-quantized config group whose weights' arguments are not NVFP4's",
    fix=(
        "declare each NVFP4 group's weights as llm-compressor writes them: num_bits 4, type float, strategy "
        "tensor_group, symmetric true, group_size 16"
    ),
    needs=("nvfp4", "quantization"),
    producers=frozenset({COMPRESSED_TENSORS}),
    examples=(
        Example(
            "nvfp4-format-8-bit-weights",
            "a config group of format nvfp4-pack-quantized whose weights say num_bits 8, over NVFP4 tensors",
            (DeclareWeights("num_bits", 8),),
        ),
    ),
    explanation="""
        A compressed-tensors config group whose `format` (its own, or the
        top-level one) is `nvfp4-pack-quantized` while its `weights`
        arguments state something else than NVFP4's: `num_bits` 4, `type`
        float, `strategy` tensor_group, `symmetric` true (a `group_size`
        other than 16 is NV609). The two fields say different things, and
        the consumers branch on different ones:

        - vLLM 0.23, 0.32 and 0.33 choose the scheme from the arguments,
          not the format (`CompressedTensorsConfig._get_scheme_from_parts`:
          `_is_nvfp4_format`), so they build another scheme, or none (`No
          compressed-tensors compatible scheme was found`), whose parameters
          the packed FP4 tensors do not fit: the engine does not start
          (observed: its experts' `Unsupported FusedMoe scheme:
          num_bits=8`, tests/vllm_layers in each release, and its linear
          layers' `No compressed-tensors compatible scheme was found`, the
          engine's start, docs/check-evidence.md); SGLang 0.5.23 tests the
          arguments too (`CompressedTensorsConfig._is_fp4a4_nvfp4`, read).
        - compressed-tensors' own decompression (transformers'
          `from_pretrained`) picks its compressor by the format.

        The finding names the group, its format and the arguments that
        contradict it. An argument a group leaves out is not judged.
        """,
)
def format_contradicts_arguments(checkpoint: CheckpointView) -> Iterator[Found]:
    declared = checkpoint.expectations.declared
    assert declared is not None  # needs: quantization
    for group in declared.nvfp4_groups:
        if group.not_nvfp4_weights:
            yield (
                None,
                declared.source or "config.json",
                f"the config group {group.name} has format {group.format}, but its weights say "
                f"{', '.join(group.not_nvfp4_weights)}, not NVFP4's",
                "vLLM 0.23, 0.32 and 0.33 and SGLang 0.5.23 choose the scheme from the weights' arguments, not the "
                "format, and build one the packed FP4 tensors do not fit, or none (observed: the engine does not "
                "start)",
            )
