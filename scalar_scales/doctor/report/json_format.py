"""The JSON report (``--output-format json``, ``--json``): one strict JSON (RFC 8259) document, versioned.

Its shape is published as a JSON Schema shipped in the package
(:data:`SCHEMA_FILE`, docs/check.md). ``schema_version`` is 1; it grows only
when a key is removed or renamed, or a value changes its type or meaning, and
a key may be added without it.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from scalar_scales.doctor.report.model import CheckReport, json_number

__all__ = ["SCHEMA_FILE", "SCHEMA_VERSION", "json_document", "schema_text"]

SCHEMA_VERSION = 1
SCHEMA_FILE = "check-report.schema.json"
"""The JSON Schema (draft 2020-12) of the document, in this package."""


def schema_text() -> str:
    """The JSON Schema of the document, as shipped."""
    return resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


def json_document(report: CheckReport, *, with_scales: bool = False) -> dict[str, Any]:
    """The document: every finding in rule code order, the engines observed not to load the checkpoint, the
    summary, and with ``with_scales`` every per-tensor scale in scope."""
    diagnosis = report.diagnosis
    scan = diagnosis.scan
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "findings": [
            {
                "code": f.code,
                "severity": f.severity,
                "effect": f.rule.effect_for(scan.layout),
                "tensor": f.tensor,
                "file": f.file,
                "message": f.message,
                "detail": f.detail,
                "why": f.why,
            }
            for f in report.reported
        ],
        "not_loaded_by": [
            {"consumer": refusal.consumer, "error": refusal.error, "loaded_by": list(refusal.loaded_by)}
            for refusal in diagnosis.refusals
        ],
        "summary": {
            "checkpoint": report.name,
            "commit": report.commit,
            "shards": len(scan.shards),
            "producer": None if scan.declared is None else scan.declared.producer,
            "format": None if scan.declared is None else scan.declared.format_name,
            "quantization_format": scan.quantization_format,
            "format_version": None if scan.declared is None else scan.declared.stated_format_version,
            "checked": report.checked,
            "nvfp4_modules": report.nvfp4_modules,
            "rules_applied": [rule.code for rule in report.applied],
            "modules": [
                {"group": group, "kind": kind, "count": n}
                for (group, kind), n in sorted(
                    diagnosis.modules.items(), key=lambda item: (str(item[0][0]), item[0][1])
                )
            ],
            "scales": scan.scale_count,
            "legacy": scan.legacy_count,
            "scalar": scan.scale_count - scan.legacy_count,
            "kv_cache_scales": scan.kv_scale_count,
            "errors": report.errors,
            "warnings": report.warnings,
            "infos": report.count("info"),
            "counts": dict(sorted(report.counts.items())),
            "exit_code": report.exit_code,
            "failed": report.failed,
            "bytes_fetched": None if report.fetched is None else report.fetched.bytes_fetched,
            "bytes_total": None if report.fetched is None else report.fetched.bytes_total,
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
