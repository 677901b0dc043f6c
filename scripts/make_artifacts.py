"""Write the round trip's artifacts in a producer environment, as files the other environments read.

    python scripts/make_artifacts.py OUT [--bf16 DIR | --toy NAME] [--ignore PATTERN ...]

OUT/bf16 is the unquantized model: the toy Qwen3-MoE, another toy
architecture (``--toy olmoe|qwen2-moe|deepseek-v3``, scalar_scales_testkit.toys),
or a copy of the bf16 checkpoint DIR (any MoE architecture llm-compressor
quantizes). ``--ignore`` leaves more modules unquantized than the preset
does (llm-compressor's ``ignore`` syntax): SGLang's MLA artifacts keep
``kv_b_proj`` in bf16, as SGLang splits that weight after loading, and an
NVFP4 one has none (``'ColumnParallelLinear' object has no attribute
'weight'``). Each producer
environment then writes, under OUT/ct-<compressed-tensors version>/, every
NVFP4 preset in four forms, and producer.json (the versions that wrote them):

    <scheme>-legacy              real ``oneshot``, unpatched: (1,) global scales
    <scheme>-format2             real ``oneshot`` inside ``compressed_tensors_patch.applied()``: 0-D, format_version 2
    <scheme>-legacy-migrated     a copy of legacy after ``scalar-scales migrate``
    <scheme>-format2-to-legacy   a copy of format2 after ``scalar-scales migrate --to legacy``

The migrations run the installed command line, as a user would. The serving
environments have no llm-compressor (their compressed-tensors pin differs),
so artifacts pass between environments on disk, as they do for users.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import warnings
from importlib import metadata
from pathlib import Path

from scalar_scales_testkit.toys import TOYS, build_toy

MIGRATIONS = {"legacy-migrated": ("legacy", "scalar"), "format2-to-legacy": ("format2", "legacy")}
"""Migrated form: (the form it is copied from, ``migrate --to``)."""


def main(out: Path, bf16_source: Path | None, toy: str | None, ignore: list[str]) -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    warnings.filterwarnings("ignore")
    import compressed_tensors
    import torch
    from llmcompressor import oneshot
    from loguru import logger
    from transformers import AutoModelForCausalLM

    import compressed_tensors_patch
    from compressed_tensors_patch import toy_moe
    from scalar_scales_testkit.producer import migrated_copy

    logger.remove()
    bf16 = out / "bf16"
    if not bf16.exists():
        if toy is not None:
            build_toy(toy, bf16)
        elif bf16_source is None:
            toy_moe.build_toy_checkpoint(bf16)
        else:
            shutil.copytree(bf16_source, bf16)
    producer = out / f"ct-{compressed_tensors.__version__}"
    producer.mkdir(parents=True, exist_ok=True)
    packages = ("torch", "transformers", "compressed-tensors", "llmcompressor")
    (producer / "producer.json").write_text(json.dumps({p: metadata.version(p) for p in packages}, sort_keys=True))
    for scheme in toy_moe.SCHEMES:
        for form, patch in (("legacy", contextlib.nullcontext), ("format2", compressed_tensors_patch.applied)):
            model = AutoModelForCausalLM.from_pretrained(bf16, dtype=torch.bfloat16)
            with patch():
                kwargs = toy_moe.oneshot_kwargs(scheme, ignore)
                oneshot(model=model, output_dir=str(producer / f"{scheme}-{form}"), **kwargs)
        for form, (source, to) in MIGRATIONS.items():
            migrated_copy(producer / f"{scheme}-{source}", producer / f"{scheme}-{form}", "--to", to)
    print(producer)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--bf16", type=Path, help="a bf16 MoE checkpoint to quantize instead of the toy Qwen3-MoE")
    source.add_argument("--toy", choices=sorted(TOYS), help="another toy architecture (scalar_scales_testkit.toys)")
    parser.add_argument("--ignore", action="append", default=[], metavar="PATTERN", help="also leave these unquantized")
    args = parser.parse_args()
    main(args.out, args.bf16, args.toy, args.ignore)
