"""The JSON report (``--output-format json``, ``--json``): one strict JSON (RFC 8259) document, versioned.

Its shape is published as a JSON Schema shipped in the package
(:data:`SCHEMA_FILE`, docs/check.md). ``schema_version`` is 1; it grows only
when a key is removed or renamed, or a value changes its type or meaning, and
a key may be added without it.

It is written in pieces, each finding and each scale filled into a template
of its shape (:mod:`.json_text`): the text is ``json.dumps(document,
indent=2)``'s, at a fraction of its time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from scalar_scales.doctor.report.json_text import (
    SLOT,
    Records,
    Template,
    Writer,
    in_a_list,
    nested,
    scalar,
    text,
    write,
)
from scalar_scales.doctor.report.model import CheckReport, Context, json_number
from scalar_scales.scan import CheckpointScan

__all__ = [
    "SCHEMA_FILE",
    "SCHEMA_VERSION",
    "emit",
    "emit_several",
    "json_document",
    "schema_text",
    "statistics_document",
]

SCHEMA_VERSION = 1
SCHEMA_FILE = "check-report.schema.json"
"""The JSON Schema (draft 2020-12) of the document, in this package."""


def schema_text() -> str:
    """The JSON Schema of the document, as shipped."""
    from importlib import resources  # here, not at the top: its own imports (tempfile, zipfile) serve this alone

    return resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


_FINDING = Template(
    {
        "code": SLOT,
        "severity": SLOT,
        "effect": SLOT,
        "tensor": SLOT,
        "file": SLOT,
        "message": SLOT,
        "detail": SLOT,
        "why": SLOT,
    },
    2,
)
_SCALE = Template({"name": SLOT, "file": SLOT, "dtype": SLOT, "shape": SLOT, "layout": SLOT, "value": SLOT}, 2)


def emit(out: Writer, report: CheckReport, context: Context) -> None:
    """The document, with ``context.with_scales`` every per-tensor scale in scope; with ``context.statistics``
    instead a list of each rule's count (:func:`statistics_document`)."""
    if context.statistics:
        write(out, statistics_document(report))
    else:
        write(out, json_document(report, with_scales=context.with_scales))


def emit_several(out: Writer, reports: Sequence[CheckReport], context: Context) -> None:
    """Several checkpoints' documents as one JSON array, in the order given: one document a JSON reader parses
    whole, each item the document :func:`emit` writes for that checkpoint; with ``--statistics``, each item the
    checkpoint's name and its counts."""
    if context.statistics:
        write(out, [{"checkpoint": report.name, "statistics": statistics_document(report)} for report in reports])
    else:
        write(out, [in_a_list(json_document(report, with_scales=context.with_scales)) for report in reports])


def statistics_document(report: CheckReport) -> list[dict[str, Any]]:
    """``--statistics`` as JSON, as ruff gives its own: for each rule with findings, the most first, its code,
    name, count, and whether one command (``migrate``) fixes its findings."""
    groups = sorted(report.by_rule, key=lambda group: (-len(group.findings), group.rule.code))
    return [
        {"code": g.rule.code, "name": g.rule.name, "count": len(g.findings), "fixable": g.rule.fixable} for g in groups
    ]


def json_document(report: CheckReport, *, with_scales: bool = False) -> dict[str, Any]:
    """The document: every finding in rule code order, the engines observed not to load the checkpoint, the
    summary, and with ``with_scales`` every per-tensor scale in scope; the findings and the scales as
    :class:`~.json_text.Records`, read as they are written."""
    diagnosis = report.diagnosis
    scan = diagnosis.scan
    document: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "findings": Records(_findings(report), 1),
        "not_loaded_by": [
            {"consumer": refusal.consumer, "error": refusal.error, "loaded_by": list(refusal.loaded_by)}
            for refusal in diagnosis.refusals
        ],
        "summary": {
            "checkpoint": report.name,
            "commit": report.commit,
            "changed_locally": list(report.changed_locally),
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
            "ignored_by_config": report.ignored_by_config,
            "exit_code": report.exit_code,
            "failed": report.failed,
            "bytes_fetched": None if report.fetched is None else report.fetched.bytes_fetched,
            "bytes_total": None if report.fetched is None else report.fetched.bytes_total,
        },
    }
    if with_scales:
        document["scales"] = Records(_scales(scan), 1)
    return document


def _findings(report: CheckReport) -> Iterator[str]:
    """Each finding's text. What findings share is written as JSON text once: their rule's code, severity and
    effect, their file, and the detail and why of a run of findings that have the same (66,048 NV101 findings
    have one)."""
    layout = report.diagnosis.scan.layout
    rules: dict[str, tuple[str, str, str]] = {}
    files: dict[str, str] = {}
    said, message = ("", ""), ("", "", "")
    for f in report.findings:
        rule = f.rule
        if (of_rule := rules.get(rule.code)) is None:
            of_rule = rules[rule.code] = (text(rule.code), text(rule.severity), text(rule.effect_for(layout)))
        if (file := files.get(f.file)) is None:
            file = files[f.file] = text(f.file)
        if (f.detail, f.why) != said:
            said, message = (f.detail, f.why), (text(f.message), text(f.detail), text(f.why))
        yield _FINDING.fill(*of_rule, "null" if f.tensor is None else text(f.tensor), file, *message)


def _scales(scan: CheckpointScan) -> Iterator[str]:
    shapes: dict[tuple[int, ...], str] = {}
    for scale in scan.scales:
        if (shape := shapes.get(scale.shape)) is None:
            shape = shapes[scale.shape] = nested(list(scale.shape), 3)
        yield _SCALE.fill(
            text(scale.name),
            text(str(scale.file)),
            text(scale.dtype),
            shape,
            text(scale.layout),
            scalar(json_number(scale.value)),
        )
