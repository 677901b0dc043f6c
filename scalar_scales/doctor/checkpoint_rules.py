"""The rules ``scalar-scales check`` settles once every shard is read: modules and fused groups that straddle
shards, the marker against the layout (NV102, NV103), the KV-cache scales against the config (NV605, NV606),
and the index against the shards (NV501, NV502)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TypeVar

from scalar_scales.doctor.config_rules import kv_cache_findings
from scalar_scales.doctor.expectations import Expectations
from scalar_scales.doctor.rules import Finding, Findings
from scalar_scales.doctor.shard_rules import ShardDiagnosis, module_findings, partner_findings
from scalar_scales.nvfp4 import COMPRESSED_TENSORS, FORMAT_VERSION_KEY, SCALAR_FORMAT_VERSION
from scalar_scales.scan import CheckpointScan, UnlistedTensor

__all__ = ["checkpoint_findings", "marker_finding"]


def checkpoint_findings(scan: CheckpointScan, expectations: Expectations, codes: Collection[str]) -> Findings:
    """Every finding of the rules ``codes``: the shards' own, then those of modules and groups that straddle
    shards, the marker's, the KV-cache scales' and the index's."""
    diagnoses: list[ShardDiagnosis] = [shard.work for shard in scan.shards]
    findings = Findings()
    for diagnosis in diagnoses:
        findings.extend(diagnosis.findings)
    layout = scan.layout
    if layout is not None:
        for base, facts in _merged(diagnosis.open_modules for diagnosis in diagnoses).items():
            findings.extend(module_findings(base, facts, layout, expectations))
        for group, members in _merged(diagnosis.open_partners for diagnosis in diagnoses).items():
            findings.extend(partner_findings(group, members, layout))
        findings.extend(kv_cache_findings(sum(d.kv_scales for d in diagnoses), expectations))
        if scan.declared is not None and not scan.declared.is_nvfp4:
            modules = sum(sum(n for (_, kind), n in d.modules.items() if kind == "nvfp4") for d in diagnoses)
            findings.add("NV607", None, scan.declared.source or "config.json", _undeclared(modules, scan))
    if marker := marker_finding(scan):
        findings.add(*marker)
    findings.extend(
        Finding("NV502" if isinstance(error, UnlistedTensor) else "NV501", error.tensor, error.path, error.problem)
        for error in scan.index_errors
    )
    return findings.selected(codes)


def marker_finding(scan: CheckpointScan) -> Finding | None:
    """NV102 or NV103: compressed-tensors' marker (this project's) against the shards' layout."""
    declared = scan.declared
    if declared is None or declared.producer != COMPRESSED_TENSORS or not scan.is_nvfp4 or not scan.scale_count:
        return None
    config, legacy = declared.source or "config.json", scan.legacy_count
    if legacy and declared.format_version == SCALAR_FORMAT_VERSION:
        return Finding(
            "NV102",
            None,
            config,
            f"config.json declares {FORMAT_VERSION_KEY} 2 but {legacy} global scales are (1,): no upstream loader "
            "reads the marker (vLLM and transformers load the checkpoint as they would without it), but a tool "
            "that trusts it expects 0-D scales",
        )
    if not legacy and declared.format_version != SCALAR_FORMAT_VERSION:
        return Finding(
            "NV103",
            None,
            config,
            f"every global scale is 0-D, as vLLM wants them, but config.json does not declare {FORMAT_VERSION_KEY} "
            "2 (compressed-tensors' ModelOpt converter writes checkpoints so); every consumer loads it",
        )
    return None


def _undeclared(modules: int, scan: CheckpointScan) -> str:
    declared = scan.declared
    assert declared is not None and scan.layout is not None
    says = f"declares {declared.format_name}" if declared.format_name else "declares no quantization"
    return (
        f"the shards hold {modules} NVFP4 modules in the {scan.layout.producer} layout, but the config {says}: vLLM "
        "builds those modules unquantized and finds no weight of the names they have (observed: the engine does not "
        "start)"
    )


_K = TypeVar("_K")
_V = TypeVar("_V")


def _merged(parts: Iterable[dict[_K, dict[str, _V]]]) -> dict[_K, dict[str, _V]]:
    merged: dict[_K, dict[str, _V]] = {}
    for part in parts:
        for key, members in part.items():
            merged.setdefault(key, {}).update(members)
    return merged
