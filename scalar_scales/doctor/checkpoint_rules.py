"""The rules ``scalar-scales check`` settles once every shard is read: modules and fused groups that straddle
shards, the marker against the layout (NV102), and the index against the shards (NV501)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from scalar_scales.doctor.rules import Finding
from scalar_scales.doctor.scheme import Scheme
from scalar_scales.doctor.shard_rules import ShardDiagnosis, module_findings, partner_findings
from scalar_scales.nvfp4 import FORMAT_VERSION_KEY, LEGACY_FORMAT_VERSION
from scalar_scales.scan import CheckpointScan

__all__ = ["checkpoint_findings", "marker_mismatch"]


def checkpoint_findings(scan: CheckpointScan, scheme: Scheme | None) -> list[Finding]:
    """Every finding of every rule: the shards' own, then those of modules and groups that straddle shards,
    the marker's and the index's."""
    diagnoses: list[ShardDiagnosis] = [shard.work for shard in scan.shards]
    findings = [finding for diagnosis in diagnoses for finding in diagnosis.findings]
    for base, facts in _merged(diagnosis.open_modules for diagnosis in diagnoses).items():
        findings.extend(module_findings(base, facts, scheme))
    for group, members in _merged(diagnosis.open_partners for diagnosis in diagnoses).items():
        findings.extend(partner_findings(group, members))
    if mismatch := marker_mismatch(scan):
        findings.append(Finding("NV102", None, str(scan.checkpoint.config), mismatch))
    findings.extend(Finding("NV501", error.tensor, error.path, error.problem) for error in scan.index_errors)
    return findings


def marker_mismatch(scan: CheckpointScan) -> str | None:
    """Why the config's declaration disagrees with the shards, if it does."""
    if scan.declared is None or not scan.scale_count or not scan.is_nvfp4:
        return None
    declared, legacy = scan.declared_format_version, scan.legacy_count
    if legacy and declared != LEGACY_FORMAT_VERSION:
        return (
            f"config.json declares {FORMAT_VERSION_KEY} {declared} but {legacy} scales are (1,): "
            "a loader that trusts the marker expects 0-D scales"
        )
    if not legacy and declared == LEGACY_FORMAT_VERSION:
        return (
            f"every scale is 0-D but config.json does not declare {FORMAT_VERSION_KEY} 2: "
            "a loader that trusts the marker expects (1,) scales"
        )
    return None


_K = TypeVar("_K")
_V = TypeVar("_V")


def _merged(parts: Iterable[dict[_K, dict[str, _V]]]) -> dict[_K, dict[str, _V]]:
    merged: dict[_K, dict[str, _V]] = {}
    for part in parts:
        for key, members in part.items():
            merged.setdefault(key, {}).update(members)
    return merged
