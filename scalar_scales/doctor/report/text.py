"""The text report: what was checked, then each rule's findings, errors first, then a summary line.

A checkpoint the size of DeepSeek-V4-Flash can have a finding for each of
its 66,048 scales, so each rule's group says how many findings it has and
why they matter once, then shows the first few, each as its place and its
detail, and says how many more there are; ``--show-all`` and the JSON give
every one.

The report says what was checked: the NVFP4 modules of each config group,
under the config's own name for its format, and the global scales. Where
there was nothing to check (no NVFP4 module, no scale in scope) it says so,
and never that all checks passed.

Every name in it comes from the checkpoint or a server, so each line is
written escaped (:func:`scalar_scales.errors.escaped`): a name cannot start
a line of its own or reach the terminal.
"""

from __future__ import annotations

import os
import re
import shlex
import textwrap
from collections import Counter
from collections.abc import Sequence
from itertools import groupby

from scalar_scales.doctor.report.json_text import Writer
from scalar_scales.doctor.report.model import SHOWN_PER_RULE, WIDTH, CheckReport, Context, counted
from scalar_scales.doctor.rules import SEVERITIES, Command, Finding
from scalar_scales.errors import escaped, printable
from scalar_scales.nvfp4 import MODELOPT
from scalar_scales.scan import CheckpointScan
from scalar_scales.shell import command, path_argument
from scalar_scales.sources.declaration import Group

__all__ = [
    "WIDTH",
    "checked_line",
    "emit",
    "emit_several",
    "heading",
    "statistics_lines",
    "summary",
    "text_lines",
]

_KIND_TEXT = {
    "quantized": "quantized another way",
    "linear": "unquantized linear",
    "embedding": "embedding",
    "other": "other",
}


def emit(out: Writer, report: CheckReport, context: Context) -> None:
    """The report, or with ``context.statistics`` a count per rule and the summary line; with ``context.quiet``
    without the heading, what was checked and the summary line. Each line escaped but the counts'."""
    if context.statistics:  # the counts are the catalogue's codes and names, tab-separated as ruff's: not escaped
        out.write("".join(line + "\n" for line in statistics_lines(report)))
        lines = [] if context.quiet else [summary(report)]
    else:
        lines = text_lines(
            report,
            show_all=context.show_all,
            with_scales=context.with_scales,
            width=context.width,
            quiet=context.quiet,
        )
    written = [escaped(line) for line in lines]
    if context.colour:
        written = coloured(written, report, summarised=not context.quiet)
    out.write("".join(line + "\n" for line in written))


def emit_several(out: Writer, reports: Sequence[CheckReport], context: Context) -> None:
    """Each checkpoint's report as :func:`emit` writes it, a blank line between (``--statistics``' counts after a
    line naming the checkpoint, which they do not), then (but with ``--quiet``) a line for each: its name and its
    summary line, so that a check of many ends saying how each one ended."""
    for k, report in enumerate(reports):
        if k:
            out.write("\n")
        if context.statistics:
            out.write(escaped(f"{report.name}:") + "\n")
        emit(out, report, context)
    if not context.quiet:
        lines = [f"Checked {counted(len(reports), 'checkpoint')}:"]
        lines += [f"  {report.name}: {summary(report)}" for report in reports]
        out.write("\n" + "".join(escaped(line) + "\n" for line in lines))


COLOURS = {"error": "\x1b[1;31m", "warning": "\x1b[1;33m", "info": "\x1b[1;36m", "passed": "\x1b[1;32m"}
"""The colour of each severity's word (bold red, yellow, cyan), and of "All checks passed" (bold green)."""
RESET = "\x1b[0m"
_COUNTED = re.compile(r"(?<=: |, )(\d+ (?:errors?|warnings?|info))(?=,|$)")


def coloured(lines: list[str], report: CheckReport, *, summarised: bool) -> list[str]:
    """``lines``, escaped already, with the severity of each rule's first line and the summary's counts in their
    colours, as ruff colours its own. Only those lines are coloured, each known by what the report makes it start
    with, never a name from the checkpoint: the colour codes come after escaping, which would show them."""
    heads = {f"{g.rule.code} {g.rule.name} ({g.rule.severity}): ": g.rule.severity for g in report.by_rule}
    painted = []
    for line in lines:
        for head, severity in heads.items():
            if line.startswith(head):
                start = head.rindex("(") + 1
                line = f"{head[:start]}{COLOURS[severity]}{severity}{RESET}{line[start + len(severity) :]}"
                break
        painted.append(line)
    if summarised and painted:
        last = painted[-1]
        if last.startswith("All checks passed"):
            last = f"{COLOURS['passed']}All checks passed{RESET}{last.removeprefix('All checks passed')}"
        elif last.startswith("Found "):
            head, sep, rest = last.partition(" (")
            last = _COUNTED.sub(lambda m: f"{COLOURS[_severity(m[1])]}{m[1]}{RESET}", head) + sep + rest
        painted[-1] = last
    return painted


def _severity(counted_text: str) -> str:
    """The severity of ``"48 warnings"``: ``warning``."""
    return counted_text.split()[1].removesuffix("s")


def statistics_lines(report: CheckReport) -> list[str]:
    """A line per rule with findings, as ruff's ``--statistics`` prints them: the count, the code and the name, the
    name after ``[*]`` where one command fixes the rule's findings; the most findings first."""
    groups = sorted(report.by_rule, key=lambda group: (-len(group.findings), group.rule.code))
    if not groups:
        return []
    count_width = max(len(str(len(group.findings))) for group in groups)
    code_width = max(len(group.rule.code) for group in groups)
    return [
        f"{len(group.findings):>{count_width}}\t{group.rule.code:<{code_width}}\t"
        f"{'[*] ' if group.rule.fixable else ''}{group.rule.name}"
        for group in groups
    ]


def text_lines(
    report: CheckReport,
    *,
    show_all: bool = False,
    with_scales: bool = False,
    width: int = WIDTH,
    quiet: bool = False,
) -> list[str]:
    """The whole report: heading, what was checked, the scales (``with_scales``), each rule's group of
    findings (every finding with ``show_all``), the engines observed not to load it, and the summary; ``quiet``:
    without the heading, what was checked and the summary."""
    lines = [] if quiet else [heading(report)]
    if report.checked and not quiet:
        lines.append(checked_line(report))
    if with_scales:
        lines += [f"{s.layout:<7}{list(s.shape)!s:<5}{s.name} = {s.value!r}" for s in report.diagnosis.scan.scales]
    for rule, findings in report.by_rule:
        fix = f"; fix: {_fix(rule.fix, report)}" if rule.fix else ""
        lines.append(
            f"{rule.code} {rule.name} ({rule.severity}): {counted(len(findings), 'finding')}: {rule.summary}{fix}"
        )
        shown = findings if show_all else findings[:SHOWN_PER_RULE]
        for why, sharing in groupby(_by_why(shown), key=_why):
            lines += textwrap.wrap(why, max(width, 40), initial_indent="  ", subsequent_indent="  ")
            lines += [f"    {_where(finding)}  {finding.detail}" for finding in sharing]
        if len(shown) < len(findings):
            lines.append(f"  ... and {len(findings) - len(shown)} more (--show-all or --output-format json lists them)")
    lines += [f"Not loaded by {refusal}" for refusal in report.diagnosis.refusals]
    if not quiet:
        lines.append(summary(report))
    return lines


def heading(report: CheckReport) -> str:
    """The checkpoint (with the commit read, for a Hub repository), its shards, its declaration and its scales."""
    scan = report.diagnosis.scan
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
    changed = "; the cached snapshot was changed locally" if report.changed_locally else ""
    commit = f" (commit {report.commit}{changed})" if report.commit else ""
    return (
        f"{report.name}{commit}: {counted(len(scan.shards), 'shard')}, {what}, {_scales_text(scan)} "
        f"({legacy} (1,), {scan.scale_count - legacy} 0-D)" + (f", {counted(kv, 'KV-cache scale')}" if kv else "")
    )


def checked_line(report: CheckReport) -> str:
    """What the rules were applied to: the NVFP4 modules of each config group, and the modules left alone."""
    diagnosis = report.diagnosis
    groups = Counter[str]()
    others = Counter[str]()
    for (group, kind), n in diagnosis.modules.items():
        if kind == "nvfp4":
            groups[group or "no config group"] += n
        else:
            others[kind] += n
    declared = diagnosis.scan.declared
    details = {g.name: g for g in (declared.groups if declared is not None else ())}
    parts = [
        f"config group {name}, {_group_text(details[name])}: {n}" if name in details else f"{name}: {n}"
        for name, n in sorted(groups.items())
    ]
    line = f"Checked {counted(report.nvfp4_modules, 'NVFP4 module')}" + (f" ({', '.join(parts)})" if parts else "")
    line += f" and {_scales_text(diagnosis.scan)}"
    if others:
        line += "; held to the config only, not NVFP4: " + ", ".join(
            f"{n} {_KIND_TEXT[kind]}" for kind, n in sorted(others.items())
        )
    if unjudged := diagnosis.expectations.unjudged_classes:
        line += (
            f"; {', '.join(r.code for r in diagnosis.rules if r.judges_classes)} not applied: the config "
            "names classes a checkpoint "
            f"does not show ({', '.join(map(printable, unjudged))})"
        )
    return line + "."


def summary(report: CheckReport) -> str:
    """The last line: what was found (by severity, then by rule), or that nothing was, or nothing checked; how
    many findings a configuration file's ``per-module-ignores`` dropped; the engines observed not to load it; the
    bytes fetched from a Hub repository; a cached snapshot changed locally (every format says this line, so each
    says that too)."""
    scan = report.diagnosis.scan
    if not report.checked and not report.findings and (report.nvfp4_modules or scan.scale_count):
        line = (
            f"Nothing checked: no rule selected applies to this checkpoint ({_declared_text(report)}); "
            f"scalar-scales rule {' '.join(rule.code for rule in report.diagnosis.rules)} says what each is applied to."
        )
    elif not report.checked and not report.findings:
        line = (
            "Nothing checked: no NVFP4 module and no per-tensor scale in scope "
            f"({_declared_text(report)}); the rules apply to NVFP4 checkpoints."
        )
    elif not report.findings:
        line = (
            f"All checks passed: no finding from {counted(len(report.applied), 'rule')} on "
            f"{counted(report.nvfp4_modules, 'NVFP4 module')} and {_scales_text(scan)}."
        )
    else:
        by_code = ", ".join(f"{group.rule.code} {len(group.findings)}" for group in report.by_rule)
        severities = [(severity, report.count(severity)) for severity in SEVERITIES]
        counts = ", ".join(counted(n, severity) for severity, n in severities if n)
        line = f"Found {counted(len(report.findings), 'finding')}: {counts} ({by_code})."
    if report.ignored_by_config:
        line += f" {counted(report.ignored_by_config, 'finding')} ignored by per-module-ignores."
    if refusals := report.diagnosis.refusals:
        consumers = ", ".join(refusal.consumer for refusal in refusals)
        line += f" Observed not to load it: {consumers}."
    if report.fetched is not None:
        fetched, total = report.fetched.bytes_fetched, report.fetched.bytes_total
        share = 100 * fetched / total if total else 0.0
        line += f" Fetched {fetched} of the files' {total} bytes ({share:.3g}%)."
    if report.local_changes is not None:
        line += f" {report.local_changes}"
    return line


def _declared_text(report: CheckReport) -> str:
    declared = report.diagnosis.scan.declared
    if declared is None:
        return "no config.json"
    if declared.producer is None:
        return f"the config declares {declared.format_name}" if declared.format_name else "no quantization_config"
    return f"the config declares {declared.format_name}"


def _group_text(group: Group) -> str:
    activations = "W4A4" if group.input_activations else "weight-only"
    return f"{group.format} {activations}"


def _fix(fix: Command | str, report: CheckReport) -> str:
    """A fix as the report says it: a command, ready to paste (:func:`_fix_command`); what to do, as it is."""
    return _fix_command(fix.line, report) if isinstance(fix, Command) else fix


def _fix_command(fix: str, report: CheckReport) -> str:
    """The fix as a command that runs as pasted into a shell (:mod:`scalar_scales.shell`), with the scales
    ``--include`` added to the check's: a Hub repository is fixed in a local copy, since ``migrate`` edits in
    place."""
    arguments = [*shlex.split(fix), *(f"--include={pattern}" for pattern in report.include)]
    hub = report.hub
    if hub is not None:
        revision = ["--revision", hub.revision] if hub.revision else []
        download = command("hf", "download", hub.repo_id, *revision) + " --local-dir DIR"
        return f"{command(*arguments)} DIR, on a local copy ({download})"
    return command(*arguments, path_argument(report.diagnosis.scan.checkpoint.root))


def _scales_text(scan: CheckpointScan) -> str:
    """The scales checked: the layout's global scales, and the other per-tensor scales ``--include`` named."""
    included = scan.scale_count - scan.global_scale_count
    text = counted(scan.global_scale_count, "global scale")
    return text + (f" and {counted(included, 'other per-tensor scale')} (--include)" if included else "")


def _why(finding: Finding) -> str:
    return finding.why


def _by_why(findings: list[Finding]) -> list[Finding]:
    """``findings``, those that share a why together (the why first found first), each in its order."""
    order: dict[str, int] = {}
    for finding in findings:
        order.setdefault(finding.why, len(order))
    return sorted(findings, key=lambda finding: order[finding.why])


def _where(finding: Finding) -> str:
    file = os.path.basename(finding.file)
    return f"{file}: {finding.tensor}" if finding.tensor else file
