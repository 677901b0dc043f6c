"""SARIF 2.1.0 (``--output-format sarif``), as GitHub code scanning takes it: one run, every rule applied with
its reference, one result per rule and file, within the limits GitHub documents for an upload at any scale.

GitHub code scanning takes at most 25,000 results in a run (and keeps the
5,000 most severe), 1,000 locations in a result and 10 MB of gzipped SARIF;
a legacy DeepSeek-V4-Flash-shaped checkpoint has 66,048 NV101 findings in 46
shards, which as one result each it refuses. So a result stands for one
rule's findings in one file (:attr:`~.model.CheckReport.by_rule_and_file`,
most severe first, then most numerous): its message counts them and names
the first few, as a grouped annotation does; each finding, up to
:data:`MAX_LOCATIONS`, is a location of it, with its tensor as the logical
location and its detail as the location's message; and its ``properties``
count them all (``findings``), as the run's count every finding
(``findings``, ``counts``). Where there would be more than
:data:`MAX_RESULTS` results, the least severe and least numerous rule-and-file
pairs of each rule past the limit are one result of that rule, which counts
them and names their files. The locations stop at a budget of bytes
(:func:`_within_budget`) that keeps the log within 10 MB gzipped even where
the tensors' names are long and random, which gzip cannot shorten.

A finding is in a binary file (a safetensors shard) or a config, and has no
line, but code scanning wants a region with a ``startLine``: every location
names line 1 of its file. A result's ``partialFingerprints`` hash its rule
and its file's URI, so code scanning tracks it across runs (it would
otherwise hash the file's lines, which a shard does not have). A local
file's URI is relative to ``%SRCROOT%`` (the current folder) where it is
under it, else (and where the current folder is gone) an absolute ``file:``
URI; a Hub repository's files are relative to ``HFREPO``, the repository's
files at the commit read on the endpoint it was read from (``HF_ENDPOINT``),
and the run's ``versionControlProvenance`` names the repository and the
commit.

The locations are written in pieces, each filled into a template of its
file's shape (:mod:`.json_text`): the text is ``json.dumps(log, indent=2)``'s
at a fraction of its time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from scalar_scales.doctor.report.json_text import SLOT, Records, Template, Writer, listed, nested, text, write
from scalar_scales.doctor.report.model import (
    CheckReport,
    Context,
    FileFindings,
    counted,
    grouped_message,
    with_tensor,
    workspace,
    workspace_path,
)
from scalar_scales.doctor.report.text import summary
from scalar_scales.doctor.rules import EFFECTS, Finding, Rule
from scalar_scales.sources.hub_address import hub_endpoint

__all__ = [
    "HUB_BASE",
    "MAX_GZIPPED",
    "MAX_LOCATIONS",
    "MAX_RESULTS",
    "SARIF_SCHEMA",
    "SOURCE_ROOT",
    "emit",
    "emit_several",
    "sarif_document",
]

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SOURCE_ROOT = "%SRCROOT%"
HUB_BASE = "HFREPO"
INFORMATION_URI = "https://pypi.org/project/scalar-scales/"
_LEVELS = {"error": "error", "warning": "warning", "info": "note"}
MAX_RESULTS = 25_000
"""The most results GitHub code scanning takes in a run."""
MAX_LOCATIONS = 1_000
"""The most locations GitHub code scanning takes in a result."""
MAX_GZIPPED = 10_000_000
"""The most bytes of gzipped SARIF GitHub code scanning takes in an upload."""
_BUDGET = MAX_GZIPPED - 1_000_000
"""What the results and their locations may take of :data:`MAX_GZIPPED`, at most; the rest is the rules' text and the
run's properties, a few kilobytes a rule."""
_PER_RESULT, _PER_LOCATION = 512, 32
"""What a result, past its message, and a location, past its tensor's name, take gzipped at most: the JSON around
them is the same text from one to the next, which gzip writes as references of a few bytes each."""


def emit(out: Writer, report: CheckReport, context: Context) -> None:
    """The SARIF log (every result whatever ``context.show_all`` says)."""
    write(out, sarif_document(report))


def emit_several(out: Writer, reports: Sequence[CheckReport], context: Context) -> None:
    """One SARIF log with a run for each checkpoint, in the order given, as SARIF holds several analyses in one
    log. Each run has its own category (``automationDetails.id``, the checkpoint's name): GitHub code scanning
    refuses an upload with two runs of one tool and category, and tracks each category's alerts apart, so two
    checkpoints' findings of one tensor are two alerts. The command refuses more runs than GitHub takes in a
    file."""
    runs = []
    for report in reports:
        (run,) = sarif_document(report)["runs"]
        run["automationDetails"] = {"id": f"scalar-scales/{report.name}/"}
        runs.append(run)
    write(out, {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": runs})


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
        "results": Records(_results(report, index, locator), 3, batch=1),  # each up to 1,000 locations
        "columnKind": "unicodeCodePoints",
        "originalUriBaseIds": locator.bases(),
        "properties": {
            "checkpoint": report.name,
            "commit": report.commit,
            "changedLocally": list(report.changed_locally),
            "summary": summary(report),
            "findings": len(report.findings),
            "counts": dict(report.counts),
        },
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
    """A result for each rule's findings in each file, most severe first, and past :data:`MAX_RESULTS` one for the
    rest of each rule's (:func:`_within_limit`)."""
    import hashlib  # here, not for every check: a check in another format has no use for it

    shape = {
        "ruleId": SLOT,
        "ruleIndex": SLOT,
        "level": SLOT,
        "message": {"text": SLOT},
        "locations": SLOT,
        "partialFingerprints": {"primaryLocationLineHash": f"{SLOT}:1", "ruleAndFile/v1": SLOT},
        "properties": SLOT,
    }
    result = Template(shape, 4)
    groups, rest = _within_limit(report.by_rule_and_file)
    locations: dict[tuple[str, bool], Template] = {}
    left = _BUDGET - sum(len(group.file) + _PER_RESULT for group in groups)
    for rule, file, findings in groups:
        uri, base = locator.locate(file)
        hashed = hashlib.sha256("\0".join([rule.code, uri]).encode()).hexdigest()
        located, left = _within_budget(findings[:MAX_LOCATIONS], left)
        if len(findings) == 1:
            message = with_tensor(findings[0], findings[0].message)
        else:
            message = grouped_message(rule, findings, _more(len(findings), len(located)))
        left -= len(message)
        yield result.fill(
            text(rule.code),
            str(index[rule.code]),
            text(_LEVELS[rule.severity]),
            text(message),
            listed(list(_locations(located, uri, base, locations)), 5),
            hashed[:16],
            text(hashed),
            nested({"findings": len(findings)}, 5),
        )
    for rule, of_rule in rest:
        files = [group.file for group in of_rule]
        count = sum(len(group.findings) for group in of_rule)
        hashed = hashlib.sha256("\0".join([rule.code, ""]).encode()).hexdigest()
        message = (
            f"{counted(count, 'more finding')} of {rule.code} in {counted(len(files), 'more file')}: "
            f"{rule.summary}; this log has at most {MAX_RESULTS:,} results, so they have none of their own "
            f"(--output-format json lists every one)"
        )
        places = [_file_location(*locator.locate(file)) for file in files[:MAX_LOCATIONS]]
        yield result.fill(
            text(rule.code),
            str(index[rule.code]),
            text(_LEVELS[rule.severity]),
            text(message),
            listed([nested(place, 6) for place in places], 5),
            hashed[:16],
            text(hashed),
            nested({"findings": count, "files": len(files)}, 5),
        )


def _more(count: int, located: int) -> str:
    """Where a result's findings past the first few its message names are."""
    if count == located:
        return "each is a location of this result"
    return f"the first {located:,} are locations of this result; --output-format json lists every one"


def _within_budget(findings: list[Finding], left: int) -> tuple[list[Finding], int]:
    """The findings that are a result's locations, and what is left of the log's budget (:data:`_BUDGET`) after
    them: each takes its tensor's name (which gzip cannot shorten where names are random) and the JSON around it.
    A result keeps its first location whatever is left: code scanning shows a result at it."""
    for count, finding in enumerate(findings):
        cost = len(finding.tensor or "") + _PER_LOCATION
        if count and cost > left:
            return findings[:count], left
        left -= cost
    return findings, left


def _within_limit(groups: list[FileFindings]) -> tuple[list[FileFindings], list[tuple[Rule, list[FileFindings]]]]:
    """``groups`` as at most :data:`MAX_RESULTS` results: each group its own, or, where there are more, the first
    groups their own and the rest of each rule's one result together, with a place kept for each rule."""
    if len(groups) <= MAX_RESULTS:
        return groups, []
    kept = MAX_RESULTS - len({group.rule.code for group in groups})
    rest: dict[str, tuple[Rule, list[FileFindings]]] = {}
    for group in groups[kept:]:
        rest.setdefault(group.rule.code, (group.rule, []))[1].append(group)
    return groups[:kept], list(rest.values())


def _file_location(uri: str, base: str | None) -> dict[str, Any]:
    artifact: dict[str, Any] = {"uri": uri} | ({"uriBaseId": base} if base else {})
    return {"physicalLocation": {"artifactLocation": artifact, "region": {"startLine": 1}}}


def _locations(
    findings: list[Finding], uri: str, base: str | None, templates: dict[tuple[str, bool], Template]
) -> Iterator[str]:
    """Each finding's location: its file at line 1, its tensor as the logical location, and its detail as the
    message. A run of findings with the same detail shares its text; each fills in its tensor."""
    said, detail = "", ""
    for finding in findings:
        tensor = finding.tensor
        key = (uri, tensor is not None)
        if (template := templates.get(key)) is None:
            location = _file_location(uri, base)
            if tensor is None:
                location["message"] = {"text": SLOT}
            else:
                location["logicalLocations"] = [{"name": SLOT, "fullyQualifiedName": SLOT, "kind": "member"}]
                location["message"] = {"text": f"{SLOT}: {SLOT}"}  # as with_tensor() writes it
            template = templates[key] = Template(location, 6)
        if finding.detail != said:
            said, detail = finding.detail, text(finding.detail)
        if tensor is None:
            yield template.fill(detail)
            continue
        name = text(tensor)
        yield template.fill(name, name, name[1:-1], detail[1:-1])


class _Locator:
    """Each file's URI: relative to the current folder (``%SRCROOT%``) where it is under it, else (and where the
    current folder is gone, when ``%SRCROOT%`` is not given) an absolute ``file:`` URI; a Hub repository's files
    relative to ``HFREPO``, the repository at the commit read, on the endpoint it was read from."""

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
            return {HUB_BASE: {"uri": f"{hub_endpoint()}/{self.hub.repo_id}/resolve/{revision}/"}}
        folder = workspace()
        return {} if folder is None else {SOURCE_ROOT: {"uri": folder.as_uri() + "/"}}

    def provenance(self) -> dict[str, Any] | None:
        if self.hub is None or self.commit is None:
            return None
        return {
            "repositoryUri": f"{hub_endpoint()}/{self.hub.repo_id}",
            "revisionId": self.commit,
            "mappedTo": {"uriBaseId": HUB_BASE},
        }
