"""``scalar-scales-demo``: the producer fix on a built-in toy MoE, side by side.

It quantizes the toy Qwen3-MoE twice with real llm-compressor ``oneshot``
(once unpatched, once inside ``compressed_tensors_patch.applied()``), then
reads both artifacts back and prints what changed. It needs the producer
extra (llm-compressor), so it lives here, beside the patch it shows, and not
in the torch-free command line.

    scalar-scales-demo [--scheme NVFP4|NVFP4A16] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scalar_scales.nvfp4 import is_global_scale
from scalar_scales.sources import CONFIG_NAME, declaration, read_config, resolve_checkpoint

__all__ = ["main", "run_demo"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scalar-scales-demo",
        description="Quantize the built-in toy Qwen3-MoE with llm-compressor, without and with "
        "compressed_tensors_patch, and show the global-scale shapes and format_version side by side.",
    )
    parser.add_argument("--scheme", choices=["NVFP4", "NVFP4A16"], default="NVFP4")
    parser.add_argument("--workdir", help="where to write the artifacts (default: a new temporary folder)")
    args = parser.parse_args(argv)
    missing = missing_producer_dependency()
    if missing is not None:
        print(f"scalar-scales-demo: error: {missing}", file=sys.stderr)
        return 2
    return run_demo(scheme=args.scheme, workdir=args.workdir)


INSTALL_PRODUCER = 'pip install torch, then pip install "/path/to/scalar-scales[producer]" (README: Install)'
"""The README's order: torch first, so the producer extra resolves against it instead of pulling a new one."""


def missing_producer_dependency() -> str | None:
    """What the demo needs and this environment lacks, as one line with the commands that install it; None when
    nothing is missing. The base install (the command line) has no torch, and the console script is installed with
    it, so a user can run the demo where it cannot work: the line says so instead of an import's traceback."""
    for module, what in (("torch", "torch"), ("llmcompressor", "llm-compressor (the producer extra)")):
        if importlib.util.find_spec(module) is None:
            needs = f"the demo quantizes a toy model with llm-compressor and needs {what}, not installed"
            return f"{needs}: {INSTALL_PRODUCER}"
    return None


def run_demo(*, scheme: str, workdir: str | None) -> int:
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import compressed_tensors
    import torch
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM

    import compressed_tensors_patch
    from compressed_tensors_patch import toy_moe

    _quiet_upstream_logging()
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="scalar-scales-demo-"))
    print(
        f"Quantizing the toy Qwen3-MoE with {scheme} (llm-compressor oneshot, compressed-tensors "
        f"{compressed_tensors.__version__}) into {root}"
    )
    bf16 = toy_moe.build_toy_checkpoint(root / "bf16")
    artifacts = {"without the fix": root / f"{scheme}-legacy", "with the fix": root / f"{scheme}-format2"}
    for label, out in artifacts.items():
        model = AutoModelForCausalLM.from_pretrained(bf16, dtype=torch.bfloat16)
        if label == "with the fix":
            with compressed_tensors_patch.applied():
                oneshot(model=model, output_dir=str(out), **toy_moe.oneshot_kwargs(scheme))
        else:
            oneshot(model=model, output_dir=str(out), **toy_moe.oneshot_kwargs(scheme))
    print()
    print(_comparison(*artifacts.items()))
    return 0


def _comparison(legacy: tuple[str, Path], fixed: tuple[str, Path]) -> str:
    (legacy_label, legacy_dir), (fixed_label, fixed_dir) = legacy, fixed
    legacy_tensors, fixed_tensors = _tensors(legacy_dir), _tensors(fixed_dir)
    scales = sorted(name for name in legacy_tensors if is_global_scale(name))
    others = [name for name in legacy_tensors if not is_global_scale(name)]
    example = next(name for name in scales if ".experts." in name)

    rows = [
        ("", legacy_label, fixed_label),
        ("config.json format_version", *(_declared(d) for d in (legacy_dir, fixed_dir))),
        (f"global-scale shapes ({len(scales)} tensors)", *(_shape_summary(t) for t in (legacy_tensors, fixed_tensors))),
        (example, *(f"{list(t[example].shape)} = {t[example].item()!r}" for t in (legacy_tensors, fixed_tensors))),
    ]
    same_values = all(_same_bytes(legacy_tensors[n], fixed_tensors[n]) for n in scales)
    same_others = all(_same_bytes(legacy_tensors[n], fixed_tensors[n]) for n in others)
    width = max(len(r[0]) for r in rows)
    col = max(len(r[1]) for r in rows)
    lines = [f"{a:<{width}}  {b:<{col}}  {c}" for a, b, c in rows]
    lines += [
        "",
        f"global-scale values bit-identical: {'yes' if same_values else 'NO'}",
        f"other {len(others)} tensors byte-identical: {'yes' if same_others else 'NO'}",
        f"artifacts: {legacy_dir}  {fixed_dir}",
    ]
    return "\n".join(lines)


def _tensors(directory: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return {name: tensor for shard in resolve_checkpoint(directory).files for name, tensor in load_file(shard).items()}


def _same_bytes(a: Any, b: Any) -> bool:
    """Equal bytes, whatever the dtype (FP8 has no ``torch.equal``) and shape (values are compared, not layouts)."""
    import torch

    return a.dtype == b.dtype and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _declared(directory: Path) -> str:
    config = read_config(directory) or {}
    declared = config.get("quantization_config", {}).get("format_version")
    legacy = declaration(config, directory / CONFIG_NAME).format_version
    return str(declared) if declared is not None else f"absent (= {legacy}, legacy)"


def _shape_summary(tensors: dict[str, Any]) -> str:
    counts = Counter(str(list(tensor.shape)) for name, tensor in tensors.items() if is_global_scale(name))
    return ", ".join(f"{shape} x{n}" for shape, n in sorted(counts.items()))


def _quiet_upstream_logging() -> None:
    """llm-compressor logs every lifecycle step (through loguru, like the patch); the demo's own table is the point."""
    from loguru import logger

    warnings.filterwarnings("ignore", category=UserWarning)
    logger.remove()


if __name__ == "__main__":
    raise SystemExit(main())
