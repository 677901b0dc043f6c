"""What a check found, worked out once for every output format: the findings of each rule, in the order a reader
wants them (errors first), their counts, what was checked, the commit read, and the exit code."""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from itertools import groupby
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple, Protocol

from scalar_scales.doctor.diagnosis import Diagnosis
from scalar_scales.doctor.rules import SEVERITIES, Finding, Rule, Severity
from scalar_scales.sources.hub_address import HubAddress

__all__ = [
    "SHOWN_PER_RULE",
    "WIDTH",
    "CheckReport",
    "Context",
    "FetchCounter",
    "FileFindings",
    "RuleFindings",
    "counted",
    "grouped_message",
    "json_number",
    "with_tensor",
    "workspace",
    "workspace_path",
]

SHOWN_PER_RULE = 5
"""How many findings of each rule the text shows without ``--show-all``."""

WIDTH = 100
"""The width each rule's explanation is wrapped to (the terminal's, where narrower)."""


@dataclass(frozen=True)
class Context:
    """What every format is given with the findings: the options that change what is printed, which the command
    refuses with a format that does not take them (``OutputFormat.options``). ``show_all``: every finding
    (``--show-all``); ``with_scales``: every per-tensor scale in scope (``--list``); ``quiet``: the findings and
    nothing else, no heading and no summary line, as ruff's ``--quiet`` prints its diagnostics alone
    (``--quiet``); ``statistics``: a count per rule instead of the findings, as ruff's ``--statistics``
    (``--statistics``); ``colour``: the severities in colour (``--color``, text only); ``width``: the width a
    rule's explanation is wrapped to."""

    show_all: bool = False
    with_scales: bool = False
    quiet: bool = False
    statistics: bool = False
    colour: bool = False
    width: int = WIDTH


class FetchCounter(Protocol):
    """A remote source's account of what it read."""

    @property
    def bytes_fetched(self) -> int: ...

    @property
    def bytes_total(self) -> int: ...


_RULE = attrgetter("rule")
_RANK = {severity: i for i, severity in enumerate(SEVERITIES)}
"""Each severity's place in a report: errors first."""


class RuleFindings(NamedTuple):
    """One rule's findings, in the order its function found them."""

    rule: Rule
    findings: list[Finding]


class FileFindings(NamedTuple):
    """One rule's findings in one file, in the order its function found them."""

    rule: Rule
    file: str
    findings: list[Finding]


@dataclass
class CheckReport:
    """What a check reports of a :class:`Diagnosis`: the findings of the rules selected, and the exit code.

    ``exit_zero``: the command exits 0 whatever was found (``--exit-zero``), so that a CI step can report
    findings without failing; a refused checkpoint still exits 2, since it never gets this far. ``include``: the
    check's ``--include`` globs, which a fix that migrates must name too. ``ignored_by_config``: how many findings
    a configuration file's ``per-module-ignores`` dropped before the report (:mod:`..settings`), which the
    summary says, so that a clean report is never clean only because a file said so unsaid.
    """

    diagnosis: Diagnosis
    strict: bool = False
    fetched: FetchCounter | None = None
    exit_zero: bool = False
    include: tuple[str, ...] = ()
    ignored_by_config: int = 0

    @property
    def findings(self) -> list[Finding]:
        """Every finding, in rule code order (the JSON document's order)."""
        return self.diagnosis.findings

    @cached_property
    def by_rule(self) -> list[RuleFindings]:
        """The findings of each rule that has any, errors first, then warnings, then information; by code within
        a severity: the order the text and the annotations give them in, so that an error is never below tens of
        thousands of warnings."""
        grouped: dict[str, RuleFindings] = {}
        for rule, run in groupby(self.findings, key=_RULE):  # a rule's findings come together, as rules find them
            if rule.code in grouped:
                grouped[rule.code].findings.extend(run)
            else:
                grouped[rule.code] = RuleFindings(rule, list(run))
        return sorted(grouped.values(), key=lambda group: (_RANK[group.rule.severity], group.rule.code))

    @cached_property
    def by_rule_and_file(self) -> list[FileFindings]:
        """The findings of each rule in each file, errors first, then warnings, then information; the most
        numerous first within a severity, then by code and file: the order of GitHub's annotations and SARIF's
        results, each of which stands for one, and whose readers show only the first few (10 annotations of a
        level, 5,000 results of an upload)."""
        grouped: dict[tuple[str, str], FileFindings] = {}
        for finding in self.findings:
            key = (finding.rule.code, finding.file)
            if (group := grouped.get(key)) is None:
                group = grouped[key] = FileFindings(finding.rule, finding.file, [])
            group.findings.append(finding)
        return sorted(
            grouped.values(),
            key=lambda group: (_RANK[group.rule.severity], -len(group.findings), group.rule.code, group.file),
        )

    @cached_property
    def counts(self) -> Counter[str]:
        """How many findings each rule has, by code."""
        return Counter({group.rule.code: len(group.findings) for group in self.by_rule})

    @property
    def errors(self) -> int:
        return self.count("error")

    @property
    def warnings(self) -> int:
        return self.count("warning")

    def count(self, severity: Severity) -> int:
        return sum(len(group.findings) for group in self.by_rule if group.rule.severity == severity)

    @property
    def applied(self) -> list[Rule]:
        """The selected rules that were applied (:meth:`Rule.applies_to`): about the checkpoint's layout, given
        what they need of it, and judging no class name a checkpoint cannot show."""
        return [rule for rule in self.diagnosis.rules if rule.applies_to(self.diagnosis.view)]

    @property
    def nvfp4_modules(self) -> int:
        return sum(n for (_, kind), n in self.diagnosis.modules.items() if kind == "nvfp4")

    @property
    def checked(self) -> bool:
        """Whether there was anything to check: an NVFP4 module, or a per-tensor scale in scope, and a selected
        rule applied to it."""
        return bool(self.applied) and bool(self.nvfp4_modules or self.diagnosis.scan.scale_count)

    @property
    def commit(self) -> str | None:
        """The commit every file was read at: a Hub repository's; None for local files."""
        return self.diagnosis.scan.opened.commit

    @property
    def changed_locally(self) -> tuple[str, ...]:
        """Offline, the cached snapshot's files that are not the commit's blobs (:attr:`~scalar_scales.sources.
        OpenedCheckpoint.changed_locally`): what was checked may not be the commit the report names."""
        return self.diagnosis.scan.opened.changed_locally

    @property
    def local_changes(self) -> str | None:
        """The sentence every format says where the cached snapshot was changed locally; None where it was not."""
        changed = self.changed_locally
        if not changed:
            return None
        are = "is not a link" if len(changed) == 1 else "are not links"
        return (
            f"The cached snapshot was changed locally: {', '.join(changed)} {are} to the cache's blobs, as "
            f"huggingface_hub caches a commit's files, so what was checked may differ from commit {self.commit}."
        )

    @property
    def hub(self) -> HubAddress | None:
        """The Hub repository checked (None for local files), as the address parsed once where it was opened, so
        that no format parses the checkpoint's name again."""
        return self.diagnosis.scan.opened.hub

    @property
    def name(self) -> str:
        """How the report names the checkpoint: a Hub repository by its ``hf://`` address, whether its files came
        over the network or from huggingface_hub's cache (offline); local files by their path."""
        return self.hub.canonical if self.hub is not None else str(self.diagnosis.scan.checkpoint.root)

    def in_repository(self, file: str) -> str:
        """A Hub check's file as its path in the repository, whether it was read over the network (its name is
        then ``hf://ORG/NAME[@REVISION]/PATH``) or from huggingface_hub's cache (a path in the snapshot)."""
        root = str(self.diagnosis.scan.checkpoint.root)
        return file.removeprefix(root).lstrip("/\\")

    @property
    def failed(self) -> bool:
        """What was found fails the check: an error, or with ``--strict`` also a warning, an engine observed not
        to load the checkpoint, or nothing checked."""
        refused = bool(self.diagnosis.refusals)
        return bool(self.errors or (self.strict and (self.warnings or refused or not self.checked)))

    @property
    def exit_code(self) -> int:
        """The command's exit code: 1 where the check failed, unless ``--exit-zero``; else 0."""
        return 1 if self.failed and not self.exit_zero else 0


def counted(n: int, noun: str) -> str:
    """``n`` with ``noun``, plural unless ``n`` is 1: "1 shard", "3 shards"; "info" is a mass noun."""
    return f"{n} {noun}" if n == 1 or noun.endswith("info") else f"{n} {noun}s"


def grouped_message(rule: Rule, findings: list[Finding], more: str) -> str:
    """The findings of one rule in one file as one message, as an annotation or a SARIF result that stands for
    them says it: how many, the first few with what is particular to each, where the rest are (``more``), and
    why they matter (once for each different why)."""
    shown = findings[:SHOWN_PER_RULE]
    lines = [f"{counted(len(findings), 'finding')} in this file: {rule.summary}"]
    lines += [with_tensor(finding, finding.detail) for finding in shown]
    if len(shown) < len(findings):
        lines.append(f"... and {len(findings) - len(shown)} more ({more})")
    return "\n".join([*lines, *dict.fromkeys(finding.why for finding in findings)])


def with_tensor(finding: Finding, text: str) -> str:
    """``text`` after the finding's tensor, ``tensor: text``, as the annotations and SARIF messages name it (a
    finding about the checkpoint as a whole has no tensor, and ``text`` alone)."""
    return f"{finding.tensor}: {text}" if finding.tensor else text


def workspace() -> Path | None:
    """The current folder, the workspace GitHub resolves annotations in and SARIF's ``%SRCROOT%``; None where it
    has no path any more (removed while the command runs in it, or before), and every file is named by its
    absolute path, in every format alike."""
    try:
        return Path(os.getcwd())
    except OSError:  # FileNotFoundError where it was removed; PermissionError where a folder above is unreadable
        return None


def workspace_path(file: str) -> str | None:
    """``file`` relative to the current folder (``/``-separated), where it lies under it; None elsewhere, and
    where there is no current folder (:func:`workspace`). ``..`` is resolved first (``os.path.abspath``), so
    ``check ../ck`` from a subfolder is outside it."""
    folder = workspace()
    if folder is None:
        return None
    try:
        return Path(os.path.abspath(file)).relative_to(folder).as_posix()
    except ValueError:  # elsewhere, or on another drive (Windows)
        return None


def json_number(value: float | None) -> float | str | None:
    """A scale value as strict JSON (RFC 8259) allows it: NaN and the infinities, which it has no literal for,
    as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``."""
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
