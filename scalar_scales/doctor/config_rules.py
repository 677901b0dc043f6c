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
from collections.abc import Collection
from dataclasses import dataclass
from itertools import repeat

from scalar_scales.doctor.expectations import Expectations
from scalar_scales.doctor.matching import Kind, Verdict, module_kind
from scalar_scales.doctor.rules import Finding, Findings
from scalar_scales.files.header import SafetensorsHeader, ending_with
from scalar_scales.nvfp4 import COMPRESSED_TENSORS, MODELOPT, ProducerLayout

__all__ = ["CLASS_RULES", "Inventory", "ModuleCounts", "config_findings", "inventory", "kv_cache_findings"]

CLASS_RULES = frozenset({"NV601", "NV602", "NV603", "NV604"})
"""The rules that judge modules against targets and ignore entries: not applied where the config names a class
a checkpoint cannot show."""

KV_SCALES = (".k_scale", ".v_scale")
_LINEAR_KINDS = ("quantized", "linear")

ModuleCounts = Counter[tuple[str | None, Kind]]
"""Modules by (the name of the NVFP4 group that quantizes them, or None; their kind)."""


@dataclass(frozen=True)
class Inventory:
    """A shard's modules, as the config rules need them."""

    names: list[str]
    """The shard's tensors."""
    modules: dict[Kind, list[str]]
    """The modules with a weight the rules judge (NVFP4, otherwise quantized, linear), by kind."""
    kv_scales: int


def inventory(
    header: SafetensorsHeader, layout: ProducerLayout, nvfp4_modules: list[str], leaves: Counter[str]
) -> Inventory:
    """Take stock of a shard's modules, ``nvfp4_modules`` (those with a packed weight) and the others, worked on
    columns (a large MoE has tens of thousands); ``leaves``: how many names end in each last part, which says
    where there is nothing to look for."""
    names, dtypes, shapes = header.names, header.dtypes, header.shapes
    modules: dict[Kind, list[str]] = {"nvfp4": nvfp4_modules, "quantized": [], "linear": []}
    packed_weights_named_weight = len(nvfp4_modules) if layout.weight == "weight" else 0
    if leaves["weight"] > packed_weights_named_weight:
        packed, held = set(nvfp4_modules), set(names)
        for i in ending_with(names, ".weight"):
            base = names[i][: -len(".weight")]
            if base not in packed:
                extra = f"{base}.e_score_correction_bias" in held
                kind = module_kind(base, (dtypes[i], shapes[i]), packed=False, extra=extra)
                if kind in _LINEAR_KINDS:
                    modules[kind].append(base)
    kv_scales = sum(map(str.endswith, names, repeat(KV_SCALES))) if leaves["k_scale"] or leaves["v_scale"] else 0
    return Inventory(names, modules, kv_scales)


def config_findings(
    file: str,
    found: Inventory,
    layout: ProducerLayout,
    expectations: Expectations,
    codes: Collection[str],
    findings: Findings,
) -> ModuleCounts:
    """NV601 to NV604 (those of ``codes``) for the modules and input scales of one shard, into ``findings``; the
    shard's modules counted by group."""
    counted: ModuleCounts = Counter()
    judged = expectations.declares and not expectations.unjudged_classes
    nvfp4_verdicts: list[Verdict] = []
    for kind, modules in found.modules.items():
        verdicts = expectations.classify_each(modules, kind)
        nvfp4_verdicts = verdicts if kind == "nvfp4" else nvfp4_verdicts
        distinct = dict(zip(map(id, verdicts), verdicts, strict=True))
        for key, n in Counter(map(id, verdicts)).items():
            groups, ignored = distinct[key]
            counted[(groups[0].name if groups and not ignored else None, kind)] += n
        rules = _MODULE_RULES[kind] & set(codes) if judged else set()
        if not any(_judgement(kind, verdict) in rules for verdict in distinct.values()):
            continue
        for module, verdict in zip(modules, verdicts, strict=True):
            code = _judgement(kind, verdict)
            if code in rules and not (code == "NV603" and module.endswith("lm_head")):
                findings.add(code, *_module_finding(code, module, kind, verdict, file, layout, expectations))
    weight_only = any(not group.input_activations for group in expectations.nvfp4_groups)
    if not judged or not weight_only or layout.producer != COMPRESSED_TENSORS or "NV604" not in codes:
        return counted  # ModelOpt's W4A16 drops input_scale
    verdict_of = dict(zip(found.modules["nvfp4"], nvfp4_verdicts, strict=True))
    for scale in (found.names[i] for i in ending_with(found.names, f".{layout.input_global}")):
        module = scale[: -len(layout.input_global) - 1]
        groups, ignored = verdict_of.get(module) or expectations.classify(module, "nvfp4")
        if groups and not ignored and not any(group.input_activations for group in groups):
            findings.add("NV604", scale, file, _weight_only_message(groups[0].name, layout.input_global))
    return counted


_MODULE_RULES: dict[Kind, frozenset[str]] = {
    "nvfp4": frozenset({"NV601", "NV602"}),
    "quantized": frozenset({"NV603"}),
    "linear": frozenset({"NV603"}),
}


def _judgement(kind: Kind, verdict: Verdict) -> str | None:
    """The rule a module of ``kind`` with ``verdict`` breaks, if any."""
    groups, ignored = verdict
    if kind == "nvfp4":
        return "NV601" if ignored else None if groups else "NV602"
    return "NV603" if groups and not ignored else None


def _module_finding(
    code: str,
    module: str,
    kind: Kind,
    verdict: Verdict,
    file: str,
    layout: ProducerLayout,
    expectations: Expectations,
) -> tuple[str, str, str]:
    """The tensor, file and message of a module's NV601, NV602 or NV603."""
    if code == "NV601":
        return f"{module}.{layout.weight}", file, _excluded_message(module, expectations)
    if code == "NV602":
        return f"{module}.{layout.weight}", file, _untargeted_message(expectations)
    how = "unquantized" if kind == "linear" else "quantized another way (its weight is not FP4)"
    return f"{module}.weight", file, _unquantized_message(verdict[0][0].name, how)


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
    "k_scale or v_scale: vLLM starts and serves without them (observed: other tokens)"
)
_KV_UNDECLARED = (
    "but the config declares no KV-cache quantization: vLLM serves the checkpoint as without them (observed)"
)
