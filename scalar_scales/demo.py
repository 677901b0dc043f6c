"""``scalar-scales demo``: the producer fix on a built-in toy MoE, side by side.

It quantizes the toy Qwen3-MoE twice with real llm-compressor ``oneshot``
(once unpatched, once inside ``compressed_tensors_patch.applied()``), then
reads both artifacts back with our own header reader and prints what changed.
"""

from __future__ import annotations

import logging
import os
import struct
import tempfile
import warnings
from collections import Counter
from pathlib import Path

from scalar_scales.checkpoint import format_version, is_global_scale, read_config, read_headers, read_tensor_bytes

__all__ = ["run_demo"]


def run_demo(*, scheme: str, workdir: str | None) -> int:
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import compressed_tensors
    import torch
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM

    import compressed_tensors_patch
    from scalar_scales import toy_moe

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
    legacy_bytes, fixed_bytes = read_tensor_bytes(legacy_dir), read_tensor_bytes(fixed_dir)
    scales = sorted(name for name in legacy_bytes if is_global_scale(name))
    others = [name for name in legacy_bytes if not is_global_scale(name)]
    example = next(name for name in scales if ".experts." in name)

    rows = [
        ("", legacy_label, fixed_label),
        ("config.json format_version", *(_declared(d) for d in (legacy_dir, fixed_dir))),
        (f"global-scale shapes ({len(scales)} tensors)", *(_shape_summary(d) for d in (legacy_dir, fixed_dir))),
        (
            example,
            *(
                f"{_shape(d, example)} = {_f32(b[example])!r}"
                for d, b in ((legacy_dir, legacy_bytes), (fixed_dir, fixed_bytes))
            ),
        ),
    ]
    same_values = all(legacy_bytes[n] == fixed_bytes[n] for n in scales)
    same_others = all(legacy_bytes[n] == fixed_bytes[n] for n in others)
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


def _declared(directory: Path) -> str:
    config = read_config(directory)
    declared = (config or {}).get("quantization_config", {}).get("format_version")
    return str(declared) if declared is not None else f"absent (= {format_version(config)}, legacy)"


def _shape_summary(directory: Path) -> str:
    counts = Counter(
        str(list(entry.shape))
        for header in read_headers(directory)
        for name, entry in header.tensors.items()
        if is_global_scale(name)
    )
    return ", ".join(f"{shape} x{n}" for shape, n in sorted(counts.items()))


def _shape(directory: Path, name: str) -> str:
    return next(str(list(h.tensors[name].shape)) for h in read_headers(directory) if name in h.tensors)


def _f32(data: bytes) -> float:
    (value,) = struct.unpack("<f", data)
    return value


def _quiet_upstream_logging() -> None:
    """llm-compressor logs every lifecycle step; the demo's own table is the point."""
    warnings.filterwarnings("ignore", category=UserWarning)
    logging.getLogger("scalar_scales").setLevel(logging.WARNING)
    try:
        from loguru import logger

        logger.remove()
    except ImportError:
        pass
