"""What ``scalar-scales check`` prints, as ruff prints its output formats: the findings worked out once
(:mod:`.model`: errors first, counted, the exit code), then rendered in the format asked for: text for people
(:mod:`.text`), a versioned JSON document with a published schema (:mod:`.json_format`), GitHub Actions
annotations (:mod:`.github`), or SARIF 2.1.0 for code scanning (:mod:`.sarif`)."""

from __future__ import annotations

import json
from typing import Literal

from scalar_scales.doctor.report.github import github_lines
from scalar_scales.doctor.report.json_format import SCHEMA_FILE, SCHEMA_VERSION, json_document, schema_text
from scalar_scales.doctor.report.model import SHOWN_PER_RULE, CheckReport, FetchCounter, counted, json_number
from scalar_scales.doctor.report.sarif import sarif_document
from scalar_scales.doctor.report.text import WIDTH, summary, text_lines

__all__ = [
    "FORMATS_TAKING",
    "OUTPUT_FORMATS",
    "SCHEMA_FILE",
    "SCHEMA_VERSION",
    "SHOWN_PER_RULE",
    "CheckReport",
    "FetchCounter",
    "OutputFormat",
    "counted",
    "github_lines",
    "json_document",
    "json_number",
    "render",
    "sarif_document",
    "schema_text",
    "summary",
    "text_lines",
]

OutputFormat = Literal["text", "json", "github", "sarif"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = ("text", "json", "github", "sarif")
FORMATS_TAKING: dict[str, tuple[OutputFormat, ...]] = {"--list": ("text", "json"), "--quiet": ("text",)}
"""The formats an option that changes what is printed means something in; the command refuses it with any other,
rather than ignore it: annotations and SARIF have no place for the scales' values, and a document or a log
reduced to its summary line is no longer one. ``--show-all`` is taken by every format: JSON and SARIF always
hold every finding."""


def render(
    report: CheckReport,
    output_format: OutputFormat,
    *,
    show_all: bool = False,
    with_scales: bool = False,
    quiet: bool = False,
    width: int = WIDTH,
) -> list[str]:
    """The report's lines in ``output_format``. ``quiet`` (text only): the summary line alone; ``with_scales``
    (text and JSON): every per-tensor scale; ``show_all`` (text and GitHub): every finding; ``width`` (text):
    the width a rule's explanation is wrapped to."""
    if output_format == "json":
        return [json.dumps(json_document(report, with_scales=with_scales), indent=2, allow_nan=False)]
    if output_format == "sarif":
        return [json.dumps(sarif_document(report), indent=2, allow_nan=False)]
    if output_format == "github":
        return github_lines(report, show_all=show_all)
    if quiet:
        return [summary(report)]
    return text_lines(report, show_all=show_all, with_scales=with_scales, width=width)
