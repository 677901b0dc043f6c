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
(NV607) are judged on the whole checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterator

from scalar_scales.doctor.matching import Kind, Verdict
from scalar_scales.doctor.rules import Found, checkpoint_rule
from scalar_scales.doctor.view import CheckpointView
from scalar_scales.files.header import ending_with
from scalar_scales.nvfp4 import COMPRESSED_TENSORS, MODELOPT

__all__ = [
    "kv_scales_missing",
    "kv_scales_undeclared",
    "nvfp4_undeclared",
    "quantized_but_ignored",
    "quantized_but_not_targeted",
    "targeted_but_not_nvfp4",
    "input_scale_for_weight_only",
]


def _judged(checkpoint: CheckpointView) -> bool:
    """The config declares groups the modules can be judged against (not class names a checkpoint cannot show)."""
    expectations = checkpoint.expectations
    return checkpoint.layout is not None and expectations.declares and not expectations.unjudged_classes


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
    "an NVFP4 module the config leaves unquantized",
    judges_classes=True,
)
def quantized_but_ignored(checkpoint: CheckpointView) -> Iterator[Found]:
    """A module stored as NVFP4 that the config's `ignore`
    (ModelOpt's hf_quant_config.json: `exclude_modules`) leaves unquantized. vLLM builds it unquantized
    and finds no parameter for its tensors: `Layer model.layers.1.mlp.experts has
    no parameter 'w2_input_global_scale'`. This is how MTP layers fail when
    `ignore` keeps `re:.*mtp\\..*` unquantized and the shards quantize them (vLLM
    #43304, #44087). Corpus case: `quantized-layer-ignored`.
    """
    if not _judged(checkpoint):
        return
    assert checkpoint.layout is not None
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
    "an NVFP4 module no NVFP4 config group targets",
    judges_classes=True,
)
def quantized_but_not_targeted(checkpoint: CheckpointView) -> Iterator[Found]:
    """A module stored as NVFP4 that no NVFP4 config group
    targets (ModelOpt MIXED_PRECISION: that `quantized_layers` does not list).
    vLLM builds it unquantized, as for NV601. Corpus case:
    `quantized-layer-untargeted`.
    """
    if not _judged(checkpoint):
        return
    assert checkpoint.layout is not None
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
    "a module an NVFP4 group targets, stored otherwise",
    judges_classes=True,
    elsewhere={MODELOPT: "nan-output"},
)
def targeted_but_not_nvfp4(checkpoint: CheckpointView) -> Iterator[Found]:
    """A linear module an NVFP4 group targets, stored
    unquantized (or quantized another way): vLLM builds it as NVFP4. In
    compressed-tensors' layout it finds a `weight` it has no parameter for,
    and does not start. ModelOpt names its packed FP4 weight `weight` too, so
    vLLM loads the stored weight's bytes as FP4 values and finds no scales for
    them: NaN output. `lm_head` is not judged: vLLM never quantizes it under
    compressed-tensors. Corpus case: `targeted-layer-unquantized`.
    """
    if not _judged(checkpoint):
        return
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
    "an input scale stored for a weight-only group",
    judges_classes=True,
    producers=frozenset({COMPRESSED_TENSORS}),
)
def input_scale_for_weight_only(checkpoint: CheckpointView) -> Iterator[Found]:
    """An `input_global_scale` stored for a module whose
    compressed-tensors config group is weight-only (`input_activations: null`,
    NVFP4A16): vLLM has no parameter for it, and its fused QKV loader fails
    (`'QKVParallelLinear' object has no attribute 'data'`). Not applied to
    ModelOpt: its weight-only methods register an `input_scale` and drop it.
    Corpus case: `weight-only-with-input-scales`.
    """
    layout, expectations = checkpoint.layout, checkpoint.expectations
    if not _judged(checkpoint) or layout is None:
        return
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
    "a declared KV-cache quantization without k_scale/v_scale",
)
def kv_scales_missing(checkpoint: CheckpointView) -> Iterator[Found]:
    """The config declares a quantized KV cache
    (`kv_cache_scheme`, ModelOpt's `kv_cache_quant_algo`), but no shard holds a
    `k_scale` or `v_scale`: vLLM starts and serves without them, and the toy
    generated other tokens. The finding names the config. Corpus case:
    `kv-scales-missing`.
    """
    declared = checkpoint.expectations.declared
    if _kv_judged(checkpoint) and declared is not None and declared.kv_cache and not checkpoint.kv_scales:
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
    "k_scale/v_scale stored without a KV-cache quantization",
)
def kv_scales_undeclared(checkpoint: CheckpointView) -> Iterator[Found]:
    """`k_scale`/`v_scale` tensors are stored, but the config
    declares no KV-cache quantization: vLLM serves the checkpoint as without them.
    Corpus case: `kv-scales-undeclared`.
    """
    declared = checkpoint.expectations.declared
    if _kv_judged(checkpoint) and declared is not None and not declared.kv_cache and checkpoint.kv_scales:
        yield (
            None,
            declared.source or "config.json",
            f"{checkpoint.kv_scales} k_scale/v_scale tensors are stored, but the config declares no KV-cache "
            "quantization",
            "vLLM serves the checkpoint as without them (observed)",
        )


def _kv_judged(checkpoint: CheckpointView) -> bool:
    return checkpoint.layout is not None and checkpoint.expectations.declares


@checkpoint_rule(
    "NV607", "nvfp4-undeclared", "error", "load-error", "NVFP4 modules in the shards, no NVFP4 in the config"
)
def nvfp4_undeclared(checkpoint: CheckpointView) -> Iterator[Found]:
    """The shards hold NVFP4 modules, in either layout, but the
    config declares no NVFP4 (no `quantization_config` and no
    `hf_quant_config.json`, or another method): vLLM builds every module
    unquantized. Corpus case: `quantization-undeclared`.
    """
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
