"""What ``scalar-scales check`` prints: findings grouped by rule, each group with its count, or one JSON document.

A checkpoint the size of DeepSeek-V4-Flash can have a finding for each of
its 66,048 scales, so the text shows the first few of each rule and says
how many more there are; ``--show-all`` and ``--json`` give every one.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from scalar_scales.doctor.diagnosis import Diagnosis
from scalar_scales.doctor.rules import RULES, Finding
from scalar_scales.sources.checkpoint import CheckpointLocation
from scalar_scales.sources.hub import HUB_PREFIX

__all__ = ["SHOWN_PER_RULE", "CheckReport", "json_number"]

SHOWN_PER_RULE = 5


class FetchCounter(Protocol):
    """A remote source's account of what it read."""

    bytes_fetched: int
    bytes_total: int


@dataclass
class CheckReport:
    """What a check reports of a :class:`Diagnosis`: the findings of the rules selected, and the exit code."""

    diagnosis: Diagnosis
    codes: frozenset[str] = frozenset(RULES)
    """The rules selected (``--select``, ``--ignore``)."""
    strict: bool = False
    fetched: FetchCounter | None = None

    @cached_property
    def reported(self) -> list[Finding]:
        """The findings of the selected rules: the diagnosis has every rule's."""
        return [finding for finding in self.diagnosis.findings if finding.code in self.codes]

    @cached_property
    def counts(self) -> Counter[str]:
        return Counter(finding.code for finding in self.reported)

    @property
    def errors(self) -> int:
        return self._count("error")

    @property
    def warnings(self) -> int:
        return self._count("warning")

    def _count(self, severity: str) -> int:
        return sum(n for code, n in self.counts.items() if RULES[code].severity == severity)

    @property
    def exit_code(self) -> int:
        return 1 if self.errors or (self.strict and self.warnings) else 0

    def heading(self) -> str:
        scan = self.diagnosis.scan
        declared = scan.declared_format_version
        marker = "no config.json" if declared is None else f"format_version {declared}"
        legacy = scan.legacy_count
        return (
            f"{scan.checkpoint.root}: {len(scan.shards)} shard(s), {scan.quantization_format or 'unknown format'}, "
            f"{marker}, {scan.scale_count} global scales ({legacy} (1,), {scan.scale_count - legacy} 0-D)"
        )

    def summary(self) -> str:
        if not self.reported:
            line = f"All checks passed: no finding from {len(self.codes)} rules."
        else:
            by_code = ", ".join(f"{code} {n}" for code, n in sorted(self.counts.items()))
            line = f"Found {len(self.reported)}: {self.errors} errors, {self.warnings} warnings ({by_code})."
        if self.fetched is not None:
            fetched, total = self.fetched.bytes_fetched, self.fetched.bytes_total
            share = 100 * fetched / total if total else 0.0
            line += f" Fetched {fetched} of the files' {total} bytes ({share:.3g}%)."
        return line

    def lines(self, *, show_all: bool = False, with_scales: bool = False) -> list[str]:
        lines = [self.heading()]
        if with_scales:
            lines += [f"{s.layout:<7}{str(list(s.shape)):<5}{s.name} = {s.value!r}" for s in self.diagnosis.scan.scales]
        groups: dict[str, list[Finding]] = {}
        for finding in self.reported:
            groups.setdefault(finding.code, []).append(finding)
        for code in sorted(groups):
            rule, members = RULES[code], groups[code]
            fix = f"; fix: {_fix_command(rule.fix, self.diagnosis.scan.checkpoint)}" if rule.fix else ""
            lines.append(f"{code} {rule.name} ({rule.severity}): {len(members)} x {rule.summary}{fix}")
            shown = members if show_all else members[:SHOWN_PER_RULE]
            lines += [f"  {code} {_where(finding)}: {finding.message}" for finding in shown]
            if len(shown) < len(members):
                lines.append(f"  ... and {len(members) - len(shown)} more {code} (--show-all or --json lists them)")
        lines.append(self.summary())
        return lines

    def document(self, *, with_scales: bool = False) -> dict[str, Any]:
        scan = self.diagnosis.scan
        document: dict[str, Any] = {
            "findings": [
                {
                    "code": f.code,
                    "severity": f.severity,
                    "tensor": f.tensor,
                    "file": f.file,
                    "message": f.message,
                }
                for f in self.reported
            ],
            "summary": {
                "checkpoint": str(scan.checkpoint.root),
                "shards": len(scan.shards),
                "quantization_format": scan.quantization_format,
                "format_version": scan.declared_format_version,
                "scales": scan.scale_count,
                "legacy": scan.legacy_count,
                "scalar": scan.scale_count - scan.legacy_count,
                "errors": self.errors,
                "warnings": self.warnings,
                "counts": dict(sorted(self.counts.items())),
                "exit_code": self.exit_code,
                "bytes_fetched": None if self.fetched is None else self.fetched.bytes_fetched,
                "bytes_total": None if self.fetched is None else self.fetched.bytes_total,
            },
        }
        if with_scales:
            document["scales"] = [
                {
                    "name": scale.name,
                    "file": str(scale.file),
                    "dtype": scale.dtype,
                    "shape": list(scale.shape),
                    "layout": scale.layout,
                    "value": json_number(scale.value),
                }
                for scale in scan.scales
            ]
        return document


def _fix_command(command: str, checkpoint: CheckpointLocation) -> str:
    """The fix as a command the user can run: a remote checkpoint is fixed in a local copy."""
    if isinstance(checkpoint.root, str) and checkpoint.root.startswith(HUB_PREFIX):
        repository, _, revision = checkpoint.root.removeprefix(HUB_PREFIX).partition("@")
        download = f"hf download {repository}" + (f" --revision {revision}" if revision else "") + " --local-dir DIR"
        return f"{command} DIR, on a local copy ({download})"
    return f"{command} {checkpoint.root}"


def _where(finding: Finding) -> str:
    file = os.path.basename(finding.file)
    return f"{file}: {finding.tensor}" if finding.tensor else file


def json_number(value: float | None) -> float | str | None:
    """A scale value as strict JSON (RFC 8259) allows it: NaN and the infinities, which it has no literal for,
    as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``."""
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
