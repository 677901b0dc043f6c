"""Quantize the toy MoE through every producer save path inside ``compressed_tensors_patch.applied()``.

    python scripts/save_paths.py OUT

OUT/bf16 is the toy model (reused if present); OUT/<scheme>-<save path> the
artifacts. scripts/verify_upstream_patch.sh runs this with the runtime patch on
released compressed-tensors (the newest, 0.20.1); tests/upstream then writes the same
artifacts with the upstream patch natively and compares them byte for byte.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path


def main(out: Path) -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    warnings.filterwarnings("ignore")
    from loguru import logger

    from compressed_tensors_patch import toy_moe
    from scalar_scales_testkit.producer import SAVE_PATH_CASES, quantize_to

    logger.remove()
    bf16 = out / "bf16"
    if not bf16.exists():
        toy_moe.build_toy_checkpoint(bf16)
    for scheme, save_path in SAVE_PATH_CASES:
        quantize_to(bf16, out / f"{scheme}-{save_path}", scheme, patched=True, save_path=save_path)
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
