"""SARIF 2.1.0 (``--output-format sarif``), as GitHub code scanning takes it: one run, every rule applied with
its reference, one result per finding.

A finding is in a binary file (a safetensors shard) or a config, and has no
line, but code scanning wants a region with a ``startLine``: every result
names line 1 of its file and, as a logical location, its tensor. Its
``partialFingerprints`` hash the rule, the file's path and the tensor, so
code scanning tracks a finding across runs (it would otherwise hash the
file's lines, which a shard does not have). A local file's URI is relative
to ``%SRCROOT%`` (the current folder) where it is under it, else (and
where the current folder is gone) an absolute ``file:`` URI; a Hub
repository's files are relative to ``HFREPO``, the repository's files at
the commit read, and the run's ``versionControlProvenance`` names the
repository and the commit.

The results are written in pieces, each filled into a template of its
file's and rule's shape (:mod:`.json_text`): 66,048 findings are 86 MB of
SARIF, whose text is ``json.dumps(log, indent=2)``'s at a fraction of its
time.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from scalar_scales.doctor.report.json_text import SLOT, Records, Template, Writer, text, write
from scalar_scales.doctor.report.model import CheckReport, Context, workspace, workspace_path
from scalar_scales.doctor.report.text import summary
from scalar_scales.doctor.rules import EFFECTS, Finding, Rule

__all__ = ["HUB_BASE", "SARIF_SCHEMA", "SOURCE_ROOT", "emit", "sarif_document"]

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SOURCE_ROOT = "%SRCROOT%"
HUB_BASE = "HFREPO"
INFORMATION_URI = "https://pypi.org/project/scalar-scales/"
_LEVELS = {"error": "error", "warning": "warning", "info": "note"}


def emit(out: Writer, report: CheckReport, context: Context) -> None:
    """The SARIF log (every result whatever ``context.show_all`` says)."""
    write(out, sarif_document(report))


def sarif_document(report: CheckReport) -> dict[str, Any]:
    """The SARIF log of ``report``: its tool (every rule applied), its results (as :class:`~.json_text.Records`,
    read as they are written), and where the files were read."""
    from scalar_scales.version import installed_version

    rules = report.applied
    for group in report.by_rule:  # a rule with findings is applied; this keeps its index whatever the layout
        if group.rule not in rules:
            rules.append(group.rule)
    index = {rule.code: i for i, rule in enumerate(rules)}
    locator = _Locator(report)
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "scalar-scales",
                "version": installed_version(),
                "informationUri": INFORMATION_URI,
                "rules": [_rule(rule) for rule in rules],
            }
        },
        "results": Records(_results(report, index, locator), 3),
        "columnKind": "unicodeCodePoints",
        "originalUriBaseIds": locator.bases(),
        "properties": {"checkpoint": report.name, "commit": report.commit, "summary": summary(report)},
    }
    if provenance := locator.provenance():
        run["versionControlProvenance"] = [provenance]
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _rule(rule: Rule) -> dict[str, Any]:
    effect = f"Effect: {rule.effect} ({EFFECTS[rule.effect]})."
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": f"Finds {rule.summary}. {effect}"},
        "help": {"text": rule.explanation, "markdown": rule.explanation},
        "defaultConfiguration": {"level": _LEVELS[rule.severity]},
        "properties": {
            "tags": ["nvfp4", rule.effect],
            "precision": "very-high",
            "problem.severity": {"error": "error", "warning": "warning", "info": "recommendation"}[rule.severity],
        },
    }


def _results(report: CheckReport, index: dict[str, int], locator: _Locator) -> Iterator[str]:
    """Each finding's result. The results of one rule in one file share their shape, written once as a template
    (:func:`_result_template`), and a run of findings with the same detail and why shares its text; each fills in
    its tensor and its fingerprints."""
    shapes: dict[tuple[str, str, bool], tuple[Template, bytes]] = {}
    said, rest = ("", ""), ""
    for finding in report.findings:
        code, tensor = finding.code, finding.tensor
        key = (finding.file, code, tensor is not None)
        if (shape := shapes.get(key)) is None:
            shape = shapes[key] = _result_template(finding, index[code], locator)
        result, hashed = shape
        fingerprint = hashlib.sha256(hashed + (tensor or "").encode()).hexdigest()
        if tensor is None:
            yield result.fill(text(finding.message), fingerprint[:16], text(fingerprint))
            continue
        if (finding.detail, finding.why) != said:
            said, rest = (finding.detail, finding.why), text(finding.message)[1:-1]
        name = text(tensor)
        yield result.fill(name[1:-1], rest, name, name, fingerprint[:16], text(fingerprint))


def _result_template(finding: Finding, rule_index: int, locator: _Locator) -> tuple[Template, bytes]:
    """The template of a result of ``finding``'s rule in its file, as :func:`_results` fills it in, and what its
    fingerprint hashes before the tensor: the rule and the file's URI."""
    uri, base = locator.locate(finding.file)
    artifact: dict[str, Any] = {"uri": uri} | ({"uriBaseId": base} if base else {})
    location: dict[str, Any] = {"physicalLocation": {"artifactLocation": artifact, "region": {"startLine": 1}}}
    if finding.tensor is not None:
        location["logicalLocations"] = [{"name": SLOT, "fullyQualifiedName": SLOT, "kind": "member"}]
    result = {
        "ruleId": finding.code,
        "ruleIndex": rule_index,
        "level": _LEVELS[finding.severity],
        "message": {"text": SLOT if finding.tensor is None else f"{SLOT}: {SLOT}"},  # as with_tensor() writes it
        "locations": [location],
        "partialFingerprints": {"primaryLocationLineHash": f"{SLOT}:1", "tensor/v1": SLOT},
    }
    return Template(result, 4), "\0".join([finding.code, uri, ""]).encode()


class _Locator:
    """Each file's URI: relative to the current folder (``%SRCROOT%``) where it is under it, else (and where the
    current folder is gone, when ``%SRCROOT%`` is not given) an absolute ``file:`` URI; a Hub repository's files
    relative to ``HFREPO``, the repository at the commit read."""

    def __init__(self, report: CheckReport) -> None:
        self.report, self.commit, self.hub = report, report.commit, report.hub

    def locate(self, file: str) -> tuple[str, str | None]:
        if self.hub is not None:
            return quote(self.report.in_repository(file)), HUB_BASE
        relative = workspace_path(file)
        if relative is None:
            return Path(os.path.abspath(file)).as_uri(), None
        return quote(relative), SOURCE_ROOT

    def bases(self) -> dict[str, Any]:
        if self.hub is not None:
            revision = quote(self.commit or self.hub.revision or "main", safe="")  # refs/pr/1 is one segment
            return {HUB_BASE: {"uri": f"https://huggingface.co/{self.hub.repo_id}/resolve/{revision}/"}}
        folder = workspace()
        return {} if folder is None else {SOURCE_ROOT: {"uri": folder.as_uri() + "/"}}

    def provenance(self) -> dict[str, Any] | None:
        if self.hub is None or self.commit is None:
            return None
        return {
            "repositoryUri": f"https://huggingface.co/{self.hub.repo_id}",
            "revisionId": self.commit,
            "mappedTo": {"uriBaseId": HUB_BASE},
        }
