"""Every rule applied to a checkpoint: one scan of its shards with the per-shard rules in each job, then the
rules that need the whole checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scalar_scales.doctor.checkpoint_rules import checkpoint_findings
from scalar_scales.doctor.rules import Finding
from scalar_scales.doctor.scheme import Scheme, scheme_of
from scalar_scales.doctor.shard_rules import ShardChecks
from scalar_scales.scan import CheckpointScan, scan_shards
from scalar_scales.sources.checkpoint import OpenedCheckpoint

__all__ = ["Diagnosis", "diagnose"]


@dataclass(frozen=True)
class Diagnosis:
    """What the scan read, the config's NVFP4 scheme, and every rule's findings."""

    scan: CheckpointScan
    scheme: Scheme | None
    findings: list[Finding]


def diagnose(opened: OpenedCheckpoint, *, include: Sequence[str] = ()) -> Diagnosis:
    """Apply every rule to ``opened`` (``include``: also these per-tensor scales, by glob)."""
    scheme = scheme_of(opened.config, str(opened.location.config))
    scan = scan_shards(opened, include=include, work=ShardChecks(scheme))
    return Diagnosis(scan, scheme, checkpoint_findings(scan, scheme))
