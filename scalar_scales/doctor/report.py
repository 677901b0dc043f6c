"""What ``scalar-scales check`` prints: findings grouped by rule, each group with its count, or one JSON document.

A checkpoint the size of DeepSeek-V4-Flash can have a finding for each of
its 66,048 scales, so the text shows the first few of each rule and says
how many more there are; ``--show-all`` and ``--json`` give every one.

The report says what was checked: the NVFP4 modules of each config group,
under the config's own name for its format, and the global scales. Where
there was nothing to check (no NVFP4 module, no scale in scope) it says so,
and never that all checks passed.
"""

from __future__ import annotations

import math
import operator
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from itertools import groupby, islice
from typing import Any, Protocol

from scalar_scales.doctor.diagnosis import Diagnosis
from scalar_scales.doctor.rules import SEVERITIES, Finding, Rule, Severity
from scalar_scales.errors import printable
from scalar_scales.nvfp4 import MODELOPT
from scalar_scales.scan import CheckpointScan
from scalar_scales.sources.checkpoint import CheckpointLocation
from scalar_scales.sources.declaration import Group
from scalar_scales.sources.hub import HUB_PREFIX

__all__ = ["SHOWN_PER_RULE", "CheckReport", "json_number"]

SHOWN_PER_RULE = 5


class FetchCounter(Protocol):
    """A remote source's account of what it read."""

    @property
    def bytes_fetched(self) -> int: ...

    @property
    def bytes_total(self) -> int: ...


@dataclass
class CheckReport:
    """What a check reports of a :class:`Diagnosis`: the findings of the rules selected, and the exit code."""

    diagnosis: Diagnosis
    strict: bool = False
    fetched: FetchCounter | None = None

    @property
    def reported(self) -> list[Finding]:
        return self.diagnosis.findings

    @cached_property
    def counts(self) -> Counter[str]:
        """How many findings each rule has, by code."""
        by_rule = Counter(map(_rule_of, self.reported))
        return Counter({rule.code: n for rule, n in by_rule.items()})

    @property
    def errors(self) -> int:
        return self.count("error")

    @property
    def warnings(self) -> int:
        return self.count("warning")

    def count(self, severity: Severity) -> int:
        return sum(self.counts[rule.code] for rule in self.diagnosis.rules if rule.severity == severity)

    @property
    def applied(self) -> list[Rule]:
        """The selected rules that were applied: those about the checkpoint's layout, and not those that judge
        modules against class names where the config names a class no module can be judged against."""
        unjudged = bool(self.diagnosis.expectations.unjudged_classes)
        layout = self.diagnosis.scan.layout
        return [
            rule for rule in self.diagnosis.rules if not (unjudged and rule.judges_classes) and rule.is_about(layout)
        ]

    @property
    def nvfp4_modules(self) -> int:
        return sum(n for (_, kind), n in self.diagnosis.modules.items() if kind == "nvfp4")

    @property
    def checked(self) -> bool:
        """Whether there was anything to check: an NVFP4 module, or a per-tensor scale in scope."""
        return bool(self.nvfp4_modules or self.diagnosis.scan.scale_count)

    @property
    def exit_code(self) -> int:
        refused = bool(self.diagnosis.refusals)
        return 1 if self.errors or (self.strict and (self.warnings or refused or not self.checked)) else 0

    def heading(self) -> str:
        scan = self.diagnosis.scan
        declared = scan.declared
        if declared is None:
            what = "no config.json"
        elif declared.producer is None:
            what = f"{declared.format_name or 'no quantization_config'}"
        elif declared.producer == MODELOPT:
            what = f"ModelOpt {declared.format_name} ({os.path.basename(declared.source or '')})"
        else:
            version = declared.stated_format_version
            marker = "no format_version" if version is None else f"format_version {version}"
            what = f"{declared.format_name or 'no format'}, {marker}"
        legacy, kv = scan.legacy_count, scan.kv_scale_count
        return (
            f"{scan.checkpoint.root}: {len(scan.shards)} shard(s), {what}, {_scales_text(scan)} "
            f"({legacy} (1,), {scan.scale_count - legacy} 0-D)" + (f", {kv} KV-cache scales" if kv else "")
        )

    def checked_line(self) -> str:
        """What the rules were applied to: the NVFP4 modules of each config group, and the modules left alone."""
        modules = self.diagnosis.modules
        groups = Counter[str]()
        others = Counter[str]()
        for (group, kind), n in modules.items():
            if kind == "nvfp4":
                groups[group or "no config group"] += n
            else:
                others[kind] += n
        declared = self.diagnosis.scan.declared
        details = {g.name: g for g in (declared.groups if declared is not None else ())}
        parts = [
            f"config group {name}, {_group_text(details[name])}: {n}" if name in details else f"{name}: {n}"
            for name, n in sorted(groups.items())
        ]
        line = f"Checked {self.nvfp4_modules} NVFP4 modules" + (f" ({', '.join(parts)})" if parts else "")
        line += f" and {_scales_text(self.diagnosis.scan)}"
        if others:
            line += "; held to the config only, not NVFP4: " + ", ".join(
                f"{n} {_KIND_TEXT[kind]}" for kind, n in sorted(others.items())
            )
        if unjudged := self.diagnosis.expectations.unjudged_classes:
            line += (
                f"; {', '.join(r.code for r in self.diagnosis.rules if r.judges_classes)} not applied: the config "
                "names classes a checkpoint "
                f"does not show ({', '.join(map(printable, unjudged))})"
            )
        return line + "."

    def summary(self) -> str:
        if not self.checked and not self.reported:
            line = (
                "Nothing checked: no NVFP4 module and no per-tensor scale in scope "
                f"({self._declared_text()}); the rules apply to NVFP4 checkpoints."
            )
        elif not self.reported:
            line = (
                f"All checks passed: no finding from {len(self.applied)} rules on {self.nvfp4_modules} NVFP4 "
                f"modules and {_scales_text(self.diagnosis.scan)}."
            )
        else:
            by_code = ", ".join(f"{code} {n}" for code, n in sorted(self.counts.items()))
            counted = ", ".join(f"{self.count(severity)} {_PLURAL[severity]}" for severity in SEVERITIES)
            line = f"Found {len(self.reported)}: {counted} ({by_code})."
        if refusals := self.diagnosis.refusals:
            consumers = ", ".join(refusal.consumer for refusal in refusals)
            line += f" Observed not to load it: {consumers} (docs/compatibility.md)."
        if self.fetched is not None:
            fetched, total = self.fetched.bytes_fetched, self.fetched.bytes_total
            share = 100 * fetched / total if total else 0.0
            line += f" Fetched {fetched} of the files' {total} bytes ({share:.3g}%)."
        return line

    def _declared_text(self) -> str:
        declared = self.diagnosis.scan.declared
        if declared is None:
            return "no config.json"
        if declared.producer is None:
            return f"the config declares {declared.format_name}" if declared.format_name else "no quantization_config"
        return f"the config declares {declared.format_name}"

    def lines(self, *, show_all: bool = False, with_scales: bool = False) -> list[str]:
        lines = [self.heading()]
        if self.checked:
            lines.append(self.checked_line())
        if with_scales:
            lines += [f"{s.layout:<7}{str(list(s.shape)):<5}{s.name} = {s.value!r}" for s in self.diagnosis.scan.scales]
        for rule, of_rule in groupby(self.reported, key=_rule_of):
            code, count = rule.code, self.counts[rule.code]
            fix = f"; fix: {_fix_command(rule.fix, self.diagnosis.scan.checkpoint)}" if rule.fix else ""
            lines.append(f"{code} {rule.name} ({rule.severity}): {count} x {rule.summary}{fix}")
            shown = list(islice(of_rule, None if show_all else SHOWN_PER_RULE))
            lines += [f"  {code} {_where(finding)}: {finding.message}" for finding in shown]
            if len(shown) < count:
                lines.append(f"  ... and {count - len(shown)} more {code} (--show-all or --json lists them)")
        lines += [f"Not loaded by {refusal}" for refusal in self.diagnosis.refusals]
        lines.append(self.summary())
        return lines

    def document(self, *, with_scales: bool = False) -> dict[str, Any]:
        scan = self.diagnosis.scan
        document: dict[str, Any] = {
            "findings": [
                {
                    "code": f.code,
                    "severity": f.severity,
                    "effect": f.rule.effect_for(scan.layout),
                    "tensor": f.tensor,
                    "file": f.file,
                    "message": f.message,
                }
                for f in self.reported
            ],
            "not_loaded_by": [
                {"consumer": refusal.consumer, "error": refusal.error, "loaded_by": list(refusal.loaded_by)}
                for refusal in self.diagnosis.refusals
            ],
            "summary": {
                "checkpoint": str(scan.checkpoint.root),
                "shards": len(scan.shards),
                "producer": None if scan.declared is None else scan.declared.producer,
                "format": None if scan.declared is None else scan.declared.format_name,
                "quantization_format": scan.quantization_format,
                "format_version": None if scan.declared is None else scan.declared.stated_format_version,
                "checked": self.checked,
                "nvfp4_modules": self.nvfp4_modules,
                "rules_applied": [rule.code for rule in self.applied],
                "modules": _modules_document(self.diagnosis),
                "scales": scan.scale_count,
                "legacy": scan.legacy_count,
                "scalar": scan.scale_count - scan.legacy_count,
                "kv_cache_scales": scan.kv_scale_count,
                "errors": self.errors,
                "warnings": self.warnings,
                "infos": self.count("info"),
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


_PLURAL = {"error": "errors", "warning": "warnings", "info": "info"}
_KIND_TEXT = {
    "quantized": "quantized another way",
    "linear": "unquantized linear",
    "embedding": "embedding",
    "other": "other",
}


def _group_text(group: Group) -> str:
    activations = "W4A4" if group.input_activations else "weight-only"
    return f"{group.format} {activations}"


def _modules_document(diagnosis: Diagnosis) -> list[dict[str, Any]]:
    return [
        {"group": group, "kind": kind, "count": n}
        for (group, kind), n in sorted(diagnosis.modules.items(), key=lambda item: (str(item[0][0]), item[0][1]))
    ]


def _fix_command(command: str, checkpoint: CheckpointLocation) -> str:
    """The fix as a command the user can run: a remote checkpoint is fixed in a local copy."""
    if isinstance(checkpoint.root, str) and checkpoint.root.startswith(HUB_PREFIX):
        repository, _, revision = checkpoint.root.removeprefix(HUB_PREFIX).partition("@")
        download = f"hf download {repository}" + (f" --revision {revision}" if revision else "") + " --local-dir DIR"
        return f"{command} DIR, on a local copy ({download})"
    return f"{command} {checkpoint.root}"


def _scales_text(scan: CheckpointScan) -> str:
    """The scales checked: the layout's global scales, and the other per-tensor scales ``--include`` named."""
    included = scan.scale_count - scan.global_scale_count
    text = f"{scan.global_scale_count} global scales"
    return text + (f" and {included} other per-tensor scales (--include)" if included else "")


_rule_of: Callable[[Finding], Rule] = operator.itemgetter(0)


def _where(finding: Finding) -> str:
    file = os.path.basename(finding.file)
    return f"{file}: {finding.tensor}" if finding.tensor else file


def json_number(value: float | None) -> float | str | None:
    """A scale value as strict JSON (RFC 8259) allows it: NaN and the infinities, which it has no literal for,
    as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``."""
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
