"""Reference logits for the served artifacts: transformers + compressed-tensors, in a producer environment.

    python scripts/reference_logits.py ARTIFACTS

For every artifact of ARTIFACTS/ct-<version>/ (scripts/make_artifacts.py),
loads it through llm-compressor's ``load_quantizable_moe()`` with
``compressed_tensors_patch`` applied and writes
ARTIFACTS/reference/<version>-<scheme>-<form>.json: the prompts
(``scalar_scales_testkit.roundtrip.prompt_ids()``) and, per prompt position, the logits minus their
mean. compressed-tensors runs the NVFP4 activation fake-quantization itself.
The engine tests (tests/engine) compare vLLM's output with these.

The model computes in bf16, as the artifacts declare; for each scheme's legacy
artifact it also writes the same weights' logits in float32
(``centred_logits_float32``), which the engine tests compare with vLLM's in
float32: where the two agree there, what parts them in bf16 is the order of
bf16 rounding, not what is computed.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path


def main(artifacts: Path) -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")
    warnings.filterwarnings("ignore")
    import torch
    from loguru import logger

    from scalar_scales_testkit.producer import load_and_run, logits_in_float32
    from scalar_scales_testkit.roundtrip import prompt_ids

    logger.remove()
    prompts = prompt_ids()
    out = artifacts / "reference"
    out.mkdir(exist_ok=True)
    for artifact in sorted(p for p in artifacts.glob("ct-*/*") if (p / "config.json").is_file()):
        _, logits = load_and_run(artifact, torch.tensor(prompts), patched=True)
        centred = logits - logits.mean(dim=-1, keepdim=True)
        name = f"{artifact.parent.name.removeprefix('ct-')}-{artifact.name}.json"
        document = {"prompts": prompts, "centred_logits": centred.tolist()}
        if artifact.name.split("-", 1)[1] == "legacy":
            logits32 = logits_in_float32(artifact, torch.tensor(prompts))
            document["centred_logits_float32"] = (logits32 - logits32.mean(dim=-1, keepdim=True)).tolist()
        (out / name).write_text(json.dumps(document))
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
