"""The output formats of ``scalar-scales check``, in one table (:data:`FORMATS`), as ruff's emitters are: each
format is one renderer with one signature, ``emit(out, report, context)`` (and, for a check of several
checkpoints, ``several(out, reports, context)``), from the findings and the options that
change what is printed to the text it writes, escaping what it writes itself (for a terminal, in a workflow
command, in JSON). ``--output-format``'s choices and help, the options each format takes (:data:`FORMATS_TAKING`),
and docs/check.md's table of formats (:func:`formats_table`, which ``scripts/rule_docs.py`` writes there and the
test command holds it to) all come from the table.

A new format is its module, with its ``emit`` (and its ``emit_several``, or None where several checkpoints have
no one document), and a row of :data:`FORMATS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from scalar_scales.doctor.report.github import emit as emit_github
from scalar_scales.doctor.report.json_format import emit as emit_json
from scalar_scales.doctor.report.json_format import emit_several as emit_json_several
from scalar_scales.doctor.report.json_text import Writer
from scalar_scales.doctor.report.model import CheckReport, Context
from scalar_scales.doctor.report.sarif import emit as emit_sarif
from scalar_scales.doctor.report.sarif import emit_several as emit_sarif_several
from scalar_scales.doctor.report.text import emit as emit_text
from scalar_scales.doctor.report.text import emit_several as emit_text_several

__all__ = [
    "DEFAULT_FORMAT",
    "FORMATS",
    "FORMATS_TAKING",
    "OUTPUT_FORMATS",
    "PRINTING_OPTIONS",
    "Emit",
    "EmitSeveral",
    "OutputFormat",
    "formats_help",
    "formats_table",
]

PRINTING_OPTIONS = ("--list", "--show-all", "--quiet", "--statistics")
"""The options that change what is printed (:class:`~.model.Context`): a format takes those that mean something in
it, and the command refuses the others with it, rather than ignore them."""


class Emit(Protocol):
    """A format's renderer: writes the report to ``out``, whole, and a newline after its last line."""

    def __call__(self, out: Writer, report: CheckReport, context: Context, /) -> None: ...


class EmitSeveral(Protocol):
    """A format's renderer of several checkpoints' reports, in the order given, as one output."""

    def __call__(self, out: Writer, reports: Sequence[CheckReport], context: Context, /) -> None: ...


@dataclass(frozen=True)
class OutputFormat:
    """One output format: its name (``--output-format NAME``), its renderer, what it prints, the section of
    docs/check.md that describes it, what each option of :data:`PRINTING_OPTIONS` that it takes does in it, and
    its renderer of several checkpoints with what that prints (None: a check of several is refused with it)."""

    name: str
    emit: Emit
    prints: str
    section: str
    options: Mapping[str, str]
    several: tuple[EmitSeveral, str] | None


FORMATS: dict[str, OutputFormat] = {
    row.name: row
    for row in (
        OutputFormat(
            "text",
            emit_text,
            "a report for people",
            "Output",
            {
                "--list": "the scales' lines",
                "--show-all": "every finding",
                "--quiet": "the findings and the engines observed not to load it: no heading, no summary line",
                "--statistics": "a count per rule, then the summary line",
            },
            (emit_text_several, "each report, then a line for each checkpoint: its summary"),
        ),
        OutputFormat(
            "json",
            emit_json,
            "a versioned document",
            "JSON",
            {
                "--list": '`"scales"`',
                "--show-all": "(always every finding)",
                "--statistics": "a list: a count per rule",
            },
            (emit_json_several, "an array of the documents"),
        ),
        OutputFormat(
            "github",
            emit_github,
            "GitHub Actions annotations",
            "GitHub Actions",
            {"--show-all": "an annotation per finding"},
            None,
        ),
        OutputFormat(
            "sarif",
            emit_sarif,
            "SARIF 2.1.0, for code scanning",
            "SARIF",
            {"--show-all": "(always every finding, counted)"},
            (emit_sarif_several, "a run for each checkpoint"),
        ),
    )
}
"""Every output format, the default first."""

DEFAULT_FORMAT = next(iter(FORMATS))
OUTPUT_FORMATS: tuple[str, ...] = tuple(FORMATS)

FORMATS_TAKING: dict[str, tuple[str, ...]] = {
    option: tuple(name for name, row in FORMATS.items() if option in row.options) for option in PRINTING_OPTIONS
}
"""The formats each option that changes what is printed means something in; the command refuses it with any other,
rather than ignore it: annotations and SARIF have no place for the scales' values, a document or a log without
its summary or its findings is no longer one, and annotations have nothing to count. ``--show-all`` is taken by
every format: JSON always holds every finding, and SARIF always counts every finding (and locates up to 1,000 of
a result)."""


def formats_help() -> str:
    """``--output-format``'s help: each format and what it prints."""
    named = [
        f"{name} (the default: {row.prints})" if name == DEFAULT_FORMAT else f"{name} ({row.prints})"
        for name, row in FORMATS.items()
    ]
    return f"{', '.join(named[:-1])} or {named[-1]}"


def formats_table() -> str:
    """docs/check.md's table of the formats: what each prints, and what each option does in it (or that it is
    refused)."""
    lines = [
        "| `--output-format` | prints | "
        + " | ".join(f"`{option}`" for option in PRINTING_OPTIONS)
        + " | several checkpoints |",
        "|" + "---|" * (3 + len(PRINTING_OPTIONS)),
    ]
    for name, row in FORMATS.items():
        anchor = row.section.lower().replace(" ", "-")
        cells = [
            f"`{name}`" + (" (the default)" if name == DEFAULT_FORMAT else ""),
            f"{row.prints} ([{row.section}](#{anchor}))",
            *(row.options.get(option, "refused") for option in PRINTING_OPTIONS),
            row.several[1] if row.several else "refused",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
