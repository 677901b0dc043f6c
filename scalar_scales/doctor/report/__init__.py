"""What ``scalar-scales check`` prints, as ruff prints its output formats: the findings worked out once
(:mod:`.model`: errors first, counted, the exit code), then written by the format asked for, each one renderer in
one table (:mod:`.formats`): text for people (:mod:`.text`), a versioned JSON document with a published schema
(:mod:`.json_format`), GitHub Actions annotations (:mod:`.github`), or SARIF 2.1.0 for code scanning
(:mod:`.sarif`); the two JSON formats through :mod:`.json_text`, which writes a large document in pieces."""

from __future__ import annotations

from scalar_scales.doctor.report.formats import (
    DEFAULT_FORMAT,
    FORMATS,
    FORMATS_TAKING,
    OUTPUT_FORMATS,
    PRINTING_OPTIONS,
    OutputFormat,
    formats_help,
    formats_table,
)
from scalar_scales.doctor.report.json_format import SCHEMA_FILE, SCHEMA_VERSION, schema_text
from scalar_scales.doctor.report.json_text import Writer
from scalar_scales.doctor.report.model import (
    SHOWN_PER_RULE,
    WIDTH,
    CheckReport,
    Context,
    FetchCounter,
    counted,
    json_number,
)
from scalar_scales.doctor.report.text import summary

__all__ = [
    "DEFAULT_FORMAT",
    "FORMATS",
    "FORMATS_TAKING",
    "OUTPUT_FORMATS",
    "PRINTING_OPTIONS",
    "SCHEMA_FILE",
    "SCHEMA_VERSION",
    "SHOWN_PER_RULE",
    "WIDTH",
    "CheckReport",
    "Context",
    "FetchCounter",
    "OutputFormat",
    "Writer",
    "counted",
    "formats_help",
    "formats_table",
    "json_number",
    "render",
    "schema_text",
    "summary",
]


def render(out: Writer, report: CheckReport, output_format: str, context: Context) -> None:
    """Write ``report`` to ``out`` in ``output_format`` (a name in :data:`FORMATS`), as ``context`` asks."""
    FORMATS[output_format].emit(out, report, context)
