"""GitHub Actions annotations (``--output-format github``): workflow commands, then the summary line.

A step's log shows at most 10 error and 10 warning annotations (more are
accepted, and hidden), and a legacy DeepSeek-V4-Flash-shaped checkpoint has
66,048 NV101 findings in 46 shards. So without ``--show-all`` there is one
annotation per rule and file, errors first: its count, its first findings
and why they matter; with ``--show-all``, one per finding.

A Hub repository's files are no path in the workspace: each annotation's
message starts with its file's address instead, and a notice before the
summary line names the commit every file was read at.

Every name comes from the checkpoint, so every value is escaped as GitHub's
toolkit (``@actions/core``) escapes it: a tensor's name cannot end the
command and start another; and each line as the text's are
(:func:`scalar_scales.errors.escaped`), so that none reaches the terminal
of a log read elsewhere.
"""

from __future__ import annotations

from itertools import groupby

from scalar_scales.doctor.report.json_text import Writer
from scalar_scales.doctor.report.model import (
    CheckReport,
    Context,
    grouped_message,
    with_tensor,
    workspace_path,
)
from scalar_scales.doctor.report.text import summary
from scalar_scales.doctor.rules import Finding, Rule
from scalar_scales.errors import escaped

__all__ = ["LEVELS", "annotation", "emit", "escape_data", "escape_property", "github_lines"]

LEVELS = {"error": "error", "warning": "warning", "info": "notice"}
"""The workflow command of each severity."""


def emit(out: Writer, report: CheckReport, context: Context) -> None:
    """The annotations and the summary line (:func:`github_lines`), each line escaped."""
    out.write("".join(escaped(line) + "\n" for line in github_lines(report, show_all=context.show_all)))


def github_lines(report: CheckReport, *, show_all: bool = False) -> list[str]:
    """One annotation per rule and file (per finding with ``show_all``), each not-loading engine as a warning,
    for a Hub repository a notice of the commit read, and the summary line."""
    lines: list[str] = []
    hub = report.hub
    for rule, findings in report.by_rule:
        for file, of_file in groupby(sorted(findings, key=_file), key=_file):
            in_file = list(of_file)
            # A Hub repository's file is no path in the workspace: its address starts the message instead
            where = None if hub is None else f"{hub.canonical}/{report.in_repository(file)}"
            path = file if hub is None else None
            if show_all or len(in_file) == 1:
                messages = [with_tensor(finding, finding.message) for finding in in_file]
            else:
                messages = [_grouped(rule, in_file)]
            lines += [
                annotation(rule, path, message if where is None else f"{where}: {message}") for message in messages
            ]
    lines += [
        f"::warning title={escape_property(f'Not loaded by {refusal.consumer}')}::{escape_data(str(refusal))}"
        for refusal in report.diagnosis.refusals
    ]
    if hub is not None and report.commit is not None:
        title = escape_property(f"{hub.canonical} at commit {report.commit}")
        lines.append(f"::notice title={title}::{escape_data(summary(report))}")
    lines.append(summary(report))
    return lines


def annotation(rule: Rule, file: str | None, message: str) -> str:
    """The workflow command that annotates ``file`` (a path in the workspace; None for a file that is not in it,
    such as a Hub repository's, whose message names it instead) with a finding of ``rule``."""
    title = escape_property(f"{rule.code} {rule.name}")
    if file is None:
        return f"::{LEVELS[rule.severity]} title={title}::{escape_data(message)}"
    path = escape_property(workspace_path(file) or file)
    return f"::{LEVELS[rule.severity]} file={path},title={title}::{escape_data(message)}"


def escape_data(text: str) -> str:
    """A command's message, escaped as ``@actions/core``'s ``escapeData``."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A command's property, escaped as ``@actions/core``'s ``escapeProperty``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _grouped(rule: Rule, findings: list[Finding]) -> str:
    """The findings of one rule in one file as one message: how many, the first few, and why they matter."""
    return grouped_message(rule, findings, "--show-all annotates each")


def _file(finding: Finding) -> str:
    return finding.file
