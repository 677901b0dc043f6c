"""The rules that hold what the config declares against what the shards hold (NV6).

Each shard's job takes stock of its modules (:func:`inventory`): those with
a packed FP4 weight (NVFP4), those quantized another way, unquantized linear
layers and embeddings. Each is classified against the declaration
(:mod:`.matching`), and a module stored one way where the config says
another is a finding: quantized but excluded (NV601), quantized but not
targeted (NV602), targeted but stored unquantized (NV603), an input scale
stored for a weight-only compressed-tensors group (NV604; vLLM's ModelOpt
weight-only methods register one and drop it). The KV-cache scales (NV605, NV606)
are counted in every shard and judged once all are in.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import compress, repeat

from scalar_scales.doctor.expectations import Expectations
from scalar_scales.doctor.matching import Kind, module_kind, packed_weights
from scalar_scales.doctor.rules import Finding
from scalar_scales.files.header import SafetensorsHeader
from scalar_scales.nvfp4 import COMPRESSED_TENSORS, MODELOPT, ProducerLayout

__all__ = ["CLASS_RULES", "Inventory", "config_findings", "inventory", "kv_cache_findings"]

CLASS_RULES = frozenset({"NV601", "NV602", "NV603", "NV604"})
"""The rules that judge modules against targets and ignore entries: not applied where the config names a class
a checkpoint cannot show."""

KV_SCALES = (".k_scale", ".v_scale")
_LINEAR_KINDS = ("quantized", "linear")


@dataclass
class Inventory:
    """A shard's modules, as the config rules and the summary need them."""

    kinds: dict[str, Kind] = field(default_factory=dict)
    """Each module with a weight the rules judge (NVFP4, otherwise quantized, linear), by name."""
    input_scales: list[str] = field(default_factory=list)
    """Each input scale of this layout the shard holds."""
    kv_scales: int = 0
    groups: Counter[tuple[str | None, Kind]] = field(default_factory=Counter)
    """Modules by (the name of the NVFP4 group that quantizes them, or None; their kind)."""


def _ending_with(names: list[str], suffix: str) -> list[int]:
    return list(compress(range(len(names)), map(str.endswith, names, repeat(suffix))))


def inventory(header: SafetensorsHeader, layout: ProducerLayout) -> Inventory:
    """Take stock of a shard's modules (worked on columns: a large MoE has tens of thousands)."""
    names, dtypes, shapes = header.names, header.dtypes, header.shapes
    found = Inventory()
    packed_suffix = f".{layout.weight}"
    position = dict(zip(names, range(len(names)), strict=True))
    for i in packed_weights(names, dtypes, position, layout):
        found.kinds[names[i][: -len(packed_suffix)]] = "nvfp4"
    for i in _ending_with(names, ".weight"):
        base = names[i][: -len(".weight")]
        if base not in found.kinds:
            extra = f"{base}.e_score_correction_bias" in position
            kind = module_kind(base, (dtypes[i], shapes[i]), packed=False, extra=extra)
            if kind in _LINEAR_KINDS:
                found.kinds[base] = kind
    found.input_scales = [names[i] for i in _ending_with(names, f".{layout.input_global}")]
    found.kv_scales = sum(map(str.endswith, names, repeat(KV_SCALES)))
    return found


def config_findings(file: str, found: Inventory, layout: ProducerLayout, expectations: Expectations) -> list[Finding]:
    """NV601 to NV604 for the modules and input scales of one shard; counts its modules by group."""
    findings: list[Finding] = []
    judged = expectations.declares and not expectations.unjudged_classes
    verdicts = {}
    for module, kind in found.kinds.items():
        groups, ignored = verdicts[module] = expectations.classify(module, kind)
        found.groups[(groups[0].name if groups and not ignored else None, kind)] += 1
        if not judged:
            continue
        if kind == "nvfp4":
            tensor = f"{module}.{layout.weight}"
            if ignored:
                findings.append(Finding("NV601", tensor, file, _excluded_message(module, expectations)))
            elif not groups:
                findings.append(Finding("NV602", tensor, file, _untargeted_message(expectations)))
        elif groups and not ignored and not module.endswith("lm_head"):
            how = "unquantized" if kind == "linear" else "quantized another way (its weight is not FP4)"
            findings.append(Finding("NV603", f"{module}.weight", file, _unquantized_message(groups[0].name, how)))
    weight_only = any(not group.input_activations for group in expectations.nvfp4_groups)
    if not judged or not weight_only or layout.producer != COMPRESSED_TENSORS:  # ModelOpt W4A16 drops input_scale
        return findings
    for scale in found.input_scales:
        module = scale[: -len(layout.input_global) - 1]
        groups, ignored = verdicts.get(module) or expectations.classify(module, "nvfp4")
        if groups and not ignored and not any(group.input_activations for group in groups):
            findings.append(Finding("NV604", scale, file, _weight_only_message(groups[0].name, layout.input_global)))
    return findings


def kv_cache_findings(kv_scales: int, expectations: Expectations) -> list[Finding]:
    """NV605 and NV606, once every shard's KV-cache scales are counted; they name the config."""
    if not expectations.declares or expectations.declared is None:
        return []
    config = expectations.declared.source or "config.json"
    declared = expectations.declared.kv_cache
    if declared and not kv_scales:
        return [Finding("NV605", None, config, _KV_MISSING)]
    if kv_scales and not declared:
        return [Finding("NV606", None, config, f"{kv_scales} k_scale/v_scale tensors are stored, {_KV_UNDECLARED}")]
    return []


def _excluded_message(module: str, expectations: Expectations) -> str:
    declared = expectations.declared
    what = "exclude_modules" if declared is not None and declared.producer == MODELOPT else "ignore"
    mtp = " (an MTP layer: vLLM #43304, #44087)" if "mtp" in module.lower() else ""
    return (
        f"stored as NVFP4, but the config's {what} leaves the module unquantized{mtp}: vLLM builds it unquantized "
        "and finds no weight of that name (observed: the engine does not start)"
    )


def _untargeted_message(expectations: Expectations) -> str:
    return (
        "stored as NVFP4, but no NVFP4 config group targets the module: vLLM builds it unquantized and finds no "
        "weight of that name (observed: the engine does not start)"
    )


def _unquantized_message(group: str, how: str) -> str:
    return (
        f"the NVFP4 config group {group} targets this module, but it is stored {how}: vLLM builds it as NVFP4 "
        "and finds no NVFP4 tensor for it (observed: the engine does not start)"
    )


def _weight_only_message(group: str, leaf: str) -> str:
    return (
        f"stored, but the module's config group {group} does not quantize activations (weight-only): vLLM has no "
        f"{leaf} parameter for it (observed: the engine does not start)"
    )


_KV_MISSING = (
    "the config declares quantized KV-cache scales (kv_cache_scheme, kv_cache_quant_algo), but no shard holds a "
    "k_scale or v_scale: vLLM quantizes the KV cache with its default scales (observed: other tokens)"
)
_KV_UNDECLARED = (
    "but the config declares no KV-cache quantization: vLLM serves the checkpoint as without them (observed)"
)
