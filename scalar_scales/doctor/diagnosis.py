"""Every rule applied to a checkpoint: one scan of its shards with the per-shard rules in each job, then the
rules that need the whole checkpoint."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from scalar_scales.doctor.checkpoint_rules import checkpoint_findings
from scalar_scales.doctor.expectations import Expectations, expectations_of
from scalar_scales.doctor.matching import Kind
from scalar_scales.doctor.rules import RULES, Findings
from scalar_scales.doctor.shard_rules import ShardChecks
from scalar_scales.scan import CheckpointScan, scan_shards
from scalar_scales.sources.checkpoint import OpenedCheckpoint

__all__ = ["Diagnosis", "diagnose"]


@dataclass(frozen=True)
class Diagnosis:
    """What the scan read, what the config declares of each module, and the findings of the rules ``codes``."""

    scan: CheckpointScan
    expectations: Expectations
    findings: Findings
    codes: frozenset[str]
    """The rules asked for (``--select``, ``--ignore``)."""

    @property
    def modules(self) -> Counter[tuple[str | None, Kind]]:
        """The checkpoint's modules the rules judged, by (the NVFP4 group that quantizes them, or None; their
        kind)."""
        counted: Counter[tuple[str | None, Kind]] = Counter()
        for shard in self.scan.shards:
            counted.update(shard.work.modules)
        return counted


def diagnose(
    opened: OpenedCheckpoint, *, include: Sequence[str] = (), codes: Collection[str] = frozenset(RULES)
) -> Diagnosis:
    """Apply the rules ``codes`` (every rule unless told) to ``opened`` (``include``: also these per-tensor scales,
    by glob); a rule not applied costs nothing."""
    expectations = expectations_of(opened.declared)
    index = not {"NV501", "NV502"}.isdisjoint(codes)
    scan = scan_shards(opened, include=include, work=ShardChecks(expectations, frozenset(codes)), index=index)
    return Diagnosis(scan, expectations, checkpoint_findings(scan, expectations, codes), frozenset(codes))
