"""GitHub Actions annotations (``--output-format github``): workflow commands, then the summary line; and, in a
step of a workflow (``GITHUB_STEP_SUMMARY`` set), the report as Markdown in the step's summary.

A step shows at most 10 annotations of each level (error, warning,
notice; more are accepted, and hidden), and a legacy
DeepSeek-V4-Flash-shaped checkpoint has 66,048 NV101 findings in 46
shards. So without ``--show-all`` an annotation stands for one rule's
findings in one file (:attr:`~.model.CheckReport.by_rule_and_file`: the
most severe first, then the most numerous), saying how many, the first few
and why they matter; and where a level has more of those than it shows,
its last annotation stands for the rest, counted by rule. The step
summary has them all, as a table of each rule's files and counts
(:func:`step_summary`); with ``--show-all``, an annotation per finding.

A Hub repository's files are no path in the workspace: each annotation's
message starts with its file's address instead, and a notice before the
summary line names the commit every file was read at.

Every name comes from the checkpoint, so every value is escaped as GitHub's
toolkit (``@actions/core``) escapes it: a tensor's name cannot end the
command and start another; and each line as the text's are
(:func:`scalar_scales.errors.escaped`), so that none reaches the terminal
of a log read elsewhere. In the step summary a name is Markdown's text,
never its markup (:func:`_markdown`).
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from contextlib import suppress

from scalar_scales.doctor.report.json_text import Writer
from scalar_scales.doctor.report.model import (
    CheckReport,
    Context,
    FileFindings,
    counted,
    grouped_message,
    with_tensor,
    workspace_path,
)
from scalar_scales.doctor.report.text import summary
from scalar_scales.doctor.rules import Rule
from scalar_scales.environment import others_setting
from scalar_scales.errors import escaped

__all__ = [
    "ANNOTATIONS_PER_LEVEL",
    "LEVELS",
    "SUMMARY_CELL",
    "SUMMARY_ROWS",
    "annotation",
    "emit",
    "escape_data",
    "escape_property",
    "github_lines",
    "step_summary",
]

LEVELS = {"error": "error", "warning": "warning", "info": "notice"}
"""The workflow command of each severity."""
ANNOTATIONS_PER_LEVEL = 10
"""The most annotations of one level a step shows."""
SUMMARY_ROWS = 1_000
"""The most rows of files the step summary gives, all rules together: GitHub takes at most 1 MiB of it a step."""


def emit(out: Writer, report: CheckReport, context: Context) -> None:
    """The step summary, where the step has one (``GITHUB_STEP_SUMMARY``), then the annotations and the summary
    line (:func:`github_lines`), each line escaped."""
    summarised = _write_step_summary(report)
    lines = github_lines(report, show_all=context.show_all, summarised=summarised)
    out.write("".join(escaped(line) + "\n" for line in lines))


def github_lines(report: CheckReport, *, show_all: bool = False, summarised: bool = False) -> list[str]:
    """An annotation per rule and file, at most :data:`ANNOTATIONS_PER_LEVEL` of each level with the refusals and
    the notice (per finding with ``show_all``), each not-loading engine as a warning, for a Hub repository a
    notice of the commit read, and the summary line. ``summarised``: the step summary was written, and the
    annotation that stands for the rest of a level says so."""
    hub = report.hub
    notice = hub is not None and report.commit is not None
    taken = Counter({"warning": len(report.diagnosis.refusals), "info": int(notice)})
    lines: list[str] = []
    groups = report.by_rule_and_file
    for severity in LEVELS:
        of_level = [group for group in groups if group.rule.severity == severity]
        shown = max(1, ANNOTATIONS_PER_LEVEL - taken[severity])
        if show_all or len(of_level) <= shown:
            lines += [line for group in of_level for line in _annotations(report, group, show_all)]
        else:
            lines += [line for group in of_level[: shown - 1] for line in _annotations(report, group, False)]
            lines.append(_rest(of_level[shown - 1 :], severity, summarised))
    lines += [
        f"::warning title={escape_property(f'Not loaded by {refusal.consumer}')}::{escape_data(str(refusal))}"
        for refusal in report.diagnosis.refusals
    ]
    if notice:
        changed = ", changed locally" if report.changed_locally else ""
        title = escape_property(f"{report.name} at commit {report.commit}{changed}")
        lines.append(f"::notice title={title}::{escape_data(summary(report))}")
    lines.append(summary(report))
    return lines


def _annotations(report: CheckReport, group: FileFindings, show_all: bool) -> list[str]:
    """The annotation of one rule's findings in one file; with ``show_all``, one per finding."""
    rule, file, findings = group
    # A Hub repository's file is no path in the workspace: its address starts the message instead
    where = None if report.hub is None else _shown_file(report, file)
    path = file if report.hub is None else None
    if show_all or len(findings) == 1:
        messages = [with_tensor(finding, finding.message) for finding in findings]
    else:
        messages = [grouped_message(rule, findings, "--output-format json lists every one")]
    return [annotation(rule, path, message if where is None else f"{where}: {message}") for message in messages]


def _rest(groups: list[FileFindings], severity: str, summarised: bool) -> str:
    """The annotation that stands for the rest of a level's findings, where it has more pairs of rule and file
    than a step shows annotations: how many, of each rule, in how many files."""
    by_code = Counter[str]()
    for group in groups:
        by_code[group.rule.code] += len(group.findings)
    files = len({group.file for group in groups})
    count = sum(by_code.values())
    where = "the step summary counts them by file, and " if summarised else ""
    message = (
        f"{counted(count, 'more finding')} ({', '.join(f'{code} {n}' for code, n in by_code.items())}) in "
        f"{counted(files, 'more file')}: a step shows at most {ANNOTATIONS_PER_LEVEL} annotations of a level; "
        f"{where}--output-format json lists every one"
    )
    title = escape_property(f"{counted(count, 'more ' + LEVELS[severity])}")
    return f"::{LEVELS[severity]} title={title}::{escape_data(message)}"


def annotation(rule: Rule, file: str | None, message: str) -> str:
    """The workflow command that annotates ``file`` (a path in the workspace; None for a file that is not in it,
    such as a Hub repository's, whose message names it instead) with a finding of ``rule``."""
    title = escape_property(f"{rule.code} {rule.name}")
    if file is None:
        return f"::{LEVELS[rule.severity]} title={title}::{escape_data(message)}"
    path = escape_property(_local_file(file))
    return f"::{LEVELS[rule.severity]} file={path},title={title}::{escape_data(message)}"


def escape_data(text: str) -> str:
    """A command's message, escaped as ``@actions/core``'s ``escapeData``."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A command's property, escaped as ``@actions/core``'s ``escapeProperty``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def step_summary(report: CheckReport) -> str:
    """The report as Markdown, for the step's summary: the checkpoint and the summary line, then a table of each
    rule's files, the most numerous first, with their counts and their first tensor; at most
    :data:`SUMMARY_ROWS` rows of files in all, each rule's files past them one row that counts them."""
    heading = f"### scalar-scales check {_markdown(report.name)}"
    if report.commit is not None:
        heading += f" at commit {_markdown(report.commit)}"
    lines = [heading, "", _markdown(summary(report)), ""]
    rows = SUMMARY_ROWS
    for group in report.by_rule:
        rule = group.rule
        files = [pair for pair in report.by_rule_and_file if pair.rule is rule]
        lines += [
            f"#### {rule.code} {rule.name} ({rule.severity}): {counted(len(group.findings), 'finding')}",
            "",
            _markdown(rule.summary),
            "",
            "| file | findings | first tensor |",
            "|---|--:|---|",
        ]
        for pair in files[:rows]:
            first = pair.findings[0].tensor
            tensor = "(the checkpoint as a whole)" if first is None else _cell(first)
            lines.append(f"| {_cell(_shown_file(report, pair.file))} | {len(pair.findings)} | {tensor} |")
        if rest := files[rows:]:
            count = sum(len(pair.findings) for pair in rest)
            lines.append(f"| {counted(len(rest), 'more file')} | {count} | |")
        rows = max(0, rows - len(files))
        lines.append("")
    return "\n".join(lines) + "\n"


def _write_step_summary(report: CheckReport) -> bool:
    """Append :func:`step_summary` to the file ``GITHUB_STEP_SUMMARY`` names, where it is set; whether it was
    written. A file that cannot be written is one line on stderr, and the annotations and the exit code are as
    without it: the summary adds to the report, and the check's verdict is the findings'."""
    path = others_setting("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    try:
        with open(path, "a", encoding="utf-8") as file:
            file.write(step_summary(report))
    except OSError as exc:
        with suppress(OSError):
            message = f"scalar-scales: GITHUB_STEP_SUMMARY: {path}: {exc.strerror or exc}; the step has no summary"
            print(escaped(message), file=sys.stderr, flush=True)
        return False
    return True


def _shown_file(report: CheckReport, file: str) -> str:
    """A file as the annotations name it: its address in a Hub repository, else relative to the workspace where
    it is in it, else its absolute path."""
    if report.hub is not None:
        return f"{report.hub.canonical}/{report.in_repository(file)}"
    return _local_file(file)


def _local_file(file: str) -> str:
    """A local file relative to the workspace where it is in it, else its absolute path: a path with ``..``
    (``check ../ckpt``) names no file in the workspace."""
    return workspace_path(file) or os.path.abspath(file)


_MARKUP = re.compile(r"([\\`*_\[\]|~])")


SUMMARY_CELL = 200
"""The most characters of a name a cell of the step summary shows (then ``…``): with :data:`SUMMARY_ROWS` rows, the
summary stays under the 1 MiB GitHub takes, however long a hostile checkpoint's names are."""


def _cell(text: str) -> str:
    """``text`` as Markdown (:func:`_markdown`) in a table cell, at most :data:`SUMMARY_CELL` characters."""
    shown = _markdown(text)
    return shown if len(shown) <= SUMMARY_CELL else shown[: SUMMARY_CELL - 1].rstrip("\\") + "…"


def _markdown(text: str) -> str:
    """``text`` as Markdown text, never markup: every character a terminal acts on escaped (a newline too, so a
    name stays in its table cell), HTML's ``&``, ``<`` and ``>`` as entities, and after a backslash each
    character that gives Markdown's emphasis, code, links and strikethrough, or a table's cells, their meaning
    (the text never starts a line, where others would)."""
    import html  # only where a step summary is written

    return _MARKUP.sub(r"\\\1", html.escape(escaped(text), quote=False))
