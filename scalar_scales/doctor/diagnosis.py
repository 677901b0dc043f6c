"""Every rule asked for, applied to a checkpoint: one scan of its shards, then each rule's one function."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import chain

from scalar_scales.consumers import Refusal, refusals
from scalar_scales.doctor.catalogue import RULES
from scalar_scales.doctor.expectations import Expectations, expectations_of
from scalar_scales.doctor.rules import Finding, Rule
from scalar_scales.doctor.view import CheckpointView, ModuleCounts
from scalar_scales.scan import CheckpointScan, scan_shards
from scalar_scales.sources.checkpoint import OpenedCheckpoint

__all__ = ["Diagnosis", "diagnose"]


@dataclass(frozen=True)
class Diagnosis:
    """What the scan read, what the config declares of each module, the rules asked for and their findings, rule
    by rule."""

    view: CheckpointView
    rules: tuple[Rule, ...]
    """The rules asked for (``--select``, ``--ignore``), in code order."""
    findings: list[Finding]
    refusals: list[Refusal]
    """The consumers observed in the round trip not to load a checkpoint like this one, whatever rules were asked
    for: an engine's refusal is not the checkpoint's fault, but never goes unsaid."""

    @property
    def scan(self) -> CheckpointScan:
        return self.view.scan

    @property
    def expectations(self) -> Expectations:
        return self.view.expectations

    @property
    def modules(self) -> ModuleCounts:
        """The checkpoint's modules the rules judged, by (the NVFP4 group that quantizes them, or None; their
        kind), whatever rules were asked for: the report says what was checked."""
        return self.view.module_counts


def diagnose(
    opened: OpenedCheckpoint, *, include: Sequence[str] = (), codes: Collection[str] = frozenset(RULES)
) -> Diagnosis:
    """Apply the rules ``codes`` (every rule unless told) to ``opened`` (``include``: also these per-tensor scales,
    by glob); a rule not applied costs nothing."""
    expectations = expectations_of(opened.declared)
    view = CheckpointView(scan_shards(opened, include=include), expectations)
    rules = tuple(rule for code, rule in RULES.items() if code in codes)
    findings = list(chain.from_iterable(rule.findings(view) for rule in rules))
    return Diagnosis(view, rules, findings, refusals(view.scan))
