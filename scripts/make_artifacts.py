"""Write the toy MoE artifacts that the serving-side tests load, in the producer environment.

    python scripts/make_artifacts.py OUT

OUT/{NVFP4,NVFP4A16}-{legacy,format2}: quantized with real llm-compressor
``oneshot``, unpatched and inside ``compressed_tensors_patch.applied()``.
OUT/bf16 is the unquantized model. The serving environments have no
llm-compressor (their compressed-tensors pin differs), so artifacts pass
between environments as files on disk, as they do for users.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from pathlib import Path


def main(out: Path) -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    warnings.filterwarnings("ignore")
    import torch
    from llmcompressor import oneshot
    from loguru import logger
    from transformers import AutoModelForCausalLM

    import compressed_tensors_patch
    from scalar_scales import toy_moe

    logger.remove()
    bf16 = toy_moe.build_toy_checkpoint(out / "bf16")
    for scheme in toy_moe.SCHEMES:
        for form, patch in (("legacy", contextlib.nullcontext), ("format2", compressed_tensors_patch.applied)):
            model = AutoModelForCausalLM.from_pretrained(bf16, dtype=torch.bfloat16)
            with patch():
                oneshot(model=model, output_dir=str(out / f"{scheme}-{form}"), **toy_moe.oneshot_kwargs(scheme))
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
