"""The ``scalar-scales`` command: ``check`` and ``migrate``.

It never imports torch and has no dependency. The demo, which needs
llm-compressor, is the producer package's own command (``scalar-scales-demo``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from scalar_scales import __version__
from scalar_scales.migrate import MigrationReport, migrate_checkpoint
from scalar_scales.safetensors_header import CheckpointError
from scalar_scales.scan import CheckpointScan, scan_checkpoint

__all__ = ["main"]

DESCRIPTION = (
    "Fix quantized checkpoints whose per-tensor global scales have the wrong shape: "
    "NVFP4 artifacts that store *_global_scale as shape (1,) instead of 0-D (vLLM issue 43297)."
)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scalar-scales", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"scalar-scales {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = commands.add_parser(
        "check",
        help="list per-tensor global scales, their layout and suspicious values",
        description="List every per-tensor global scale: legacy (1,) or scalar (0-D), and its value; report "
        "format_version; warn about zero, negative, NaN or Inf scales. Exit 0 when clean, 1 when legacy scales "
        "(or a marker that disagrees with them) are found, 2 on unreadable or corrupt input.",
    )
    check.add_argument("path", help="checkpoint folder or .safetensors file")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.add_argument("--strict", action="store_true", help="also exit 1 on warnings")
    check.add_argument("-q", "--quiet", action="store_true", help="print only problems and the summary")
    check.add_argument("--include", action="append", default=[], metavar="GLOB", help="also these per-tensor scales")

    migrate = commands.add_parser(
        "migrate",
        help="rewrite shard headers in place so scales are 0-D (or back to legacy (1,))",
        description="Change per-tensor global scales between (1,) and 0-D by editing each shard's header in place "
        "(no tensor data is touched), then set config.json's format_version. Crash-safe and idempotent.",
    )
    migrate.add_argument("path", help="checkpoint folder or .safetensors file")
    migrate.add_argument("--to", choices=["scalar", "legacy"], default="scalar")
    migrate.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    migrate.add_argument("--json", action="store_true", help="machine-readable output, no progress bar")
    migrate.add_argument(
        "--include", action="append", default=[], metavar="GLOB", help="also these per-tensor scales (any format)"
    )
    migrate.add_argument(
        "--materialize",
        action="store_true",
        help="replace shards that are links (Hugging Face cache) with edited real copies",
    )

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            return _check(args)
        if args.command == "migrate":
            return _migrate(args)
    except CheckpointError as exc:
        print(f"scalar-scales: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"scalar-scales: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    parser.print_help()
    return 2


def _check(args: argparse.Namespace) -> int:
    scan = scan_checkpoint(args.path, include=args.include)
    problems = scan.legacy_count > 0 or scan.marker_mismatch is not None
    code = 1 if problems or (args.strict and scan.suspicious_count) else 0
    if args.json:
        print(json.dumps(_scan_document(scan, code), indent=2, allow_nan=False))
        return code
    print(_scan_heading(scan))
    for finding in scan.problems if args.quiet else scan.findings:
        shape = str(list(finding.shape))
        warning = f"  warning: {', '.join(finding.warnings)}" if finding.warnings else ""
        print(f"{finding.layout:<7}{shape:<5}{finding.name} = {finding.value!r}{warning}")
    if scan.marker_mismatch:
        print(f"problem: {scan.marker_mismatch}")
    print(_scan_summary(scan))
    return code


def _scan_heading(scan: CheckpointScan) -> str:
    declared = scan.declared_format_version
    marker = "no config.json" if declared is None else f"format_version {declared}"
    quantization_format = scan.quantization_format or "unknown format"
    return f"{scan.checkpoint.root}: {len(scan.shards)} shard(s), {quantization_format}, {marker}"


def _scan_summary(scan: CheckpointScan) -> str:
    legacy, total = scan.legacy_count, scan.scale_count
    summary = (
        f"{total} per-tensor scales: {legacy} legacy (1,), {total - legacy} scalar; {scan.suspicious_count} warnings"
    )
    if legacy or scan.marker_mismatch:
        summary += f"; fix with: scalar-scales migrate {scan.checkpoint.root}"
    return summary


def _scan_document(scan: CheckpointScan, code: int) -> dict[str, Any]:
    return {
        "checkpoint": str(scan.checkpoint.root),
        "shards": len(scan.shards),
        "quantization_format": scan.quantization_format,
        "format_version": scan.declared_format_version,
        "marker_mismatch": scan.marker_mismatch,
        "scales": [
            {
                "name": f.name,
                "file": str(f.file),
                "dtype": f.dtype,
                "shape": list(f.shape),
                "layout": f.layout,
                "value": _json_number(f.value),
                "warnings": f.warnings,
            }
            for f in scan.findings
        ],
        "legacy": scan.legacy_count,
        "scalar": scan.scale_count - scan.legacy_count,
        "warnings": scan.suspicious_count,
        "exit_code": code,
    }


def _json_number(value: float | None) -> float | str | None:
    """A scale value as strict JSON (RFC 8259) allows it: NaN and the infinities, which it has no literal for,
    as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``."""
    if value is None or math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _migrate(args: argparse.Namespace) -> int:
    show_progress = not args.json and sys.stderr.isatty()
    report = migrate_checkpoint(
        args.path,
        to=args.to,
        dry_run=args.dry_run,
        include=args.include,
        materialize=args.materialize,
        progress=_progress_bar if show_progress else None,
    )
    if show_progress and report.edits:
        print(file=sys.stderr)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(_migration_summary(report))
    return 0


def _migration_summary(report: MigrationReport) -> str:
    target = "0-D" if report.to == "scalar" else "(1,)"
    if not report.changed:
        return f"{report.checkpoint.root}: nothing to change: all {report.scales_total} scales are already {target}" + (
            f" and config.json declares format_version {report.format_version_after}"
            if report.format_version_after is not None
            else ""
        )
    verb = "would change" if report.dry_run else "changed"
    line = (
        f"{report.checkpoint.root}: {verb} {report.scales_changed} of {report.scales_total} scales to {target} "
        f"in {len(report.edits)} of {len(report.checkpoint.files)} shards"
    )
    growing = [edit for edit in report.edits if not edit.in_place]
    if report.dry_run:
        if growing:
            line += f" ({len(growing)} need a longer header and would be rewritten to new files)"
    elif report.rewritten:
        line += f" ({len(report.rewritten)} rewritten to new files, the rest in place)"
    elif report.edits:
        line += " in place (header only)"
    if report.config_changed:
        line += f"; config.json format_version {report.format_version_before} -> {report.format_version_after}"
    elif report.checkpoint.config is None:
        line += "; no config.json to update"
    return line


def _progress_bar(done: int, total: int) -> None:
    width = 30
    filled = width * done // total
    print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} shards", end="", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
