"""The ``scalar-scales`` command.

It never imports torch: subcommands that need it (``demo``) import their
module only when they run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from scalar_scales import __version__

__all__ = ["main"]

DESCRIPTION = (
    "Fix quantized checkpoints whose per-tensor global scales have the wrong shape: "
    "NVFP4 artifacts that store *_global_scale as shape (1,) instead of 0-D (vLLM issue 43297)."
)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scalar-scales", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"scalar-scales {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="quantize a built-in toy MoE with and without the producer fix and compare the artifacts",
        description="Quantize the built-in toy Qwen3-MoE with llm-compressor, without and with "
        "compressed_tensors_patch, and show the global-scale shapes and format_version side by side. "
        "Needs the producer extra (llmcompressor).",
    )
    demo.add_argument("--scheme", choices=["NVFP4", "NVFP4A16"], default="NVFP4")
    demo.add_argument("--workdir", help="where to write the artifacts (default: a new temporary folder)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from scalar_scales.demo import run_demo

        return run_demo(scheme=args.scheme, workdir=args.workdir)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
