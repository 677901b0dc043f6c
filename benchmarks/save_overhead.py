"""Save time with compressed_tensors_patch against save time without it, side by side in one run.

The toy MoE is quantized once. Each round then times two
``save_pretrained(..., save_compressed=True)`` calls, one per side:
compression, writing and ``update_config``, plus, when patched, validating
the scales and stamping the marker. Before each save an untimed forward pass
decompresses the model again (compressed-tensors' decompress hook), so every
save compresses all 56 modules. Rounds alternate which side goes first, and
the garbage collector is paused while timing, as ``timeit`` does. The figure is the median of the per-round ratios;
the ratio of the best times is printed beside it.

    OMP_NUM_THREADS=1 python benchmarks/save_overhead.py --rounds 200

Target: ratio <= 1.02.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

TARGET = 1.02


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--scheme", default="NVFP4", choices=["NVFP4", "NVFP4A16"])
    args = parser.parse_args()

    os.environ.setdefault("TQDM_DISABLE", "1")
    warnings.filterwarnings("ignore")
    import torch
    from llmcompressor import oneshot
    from loguru import logger
    from transformers import AutoModelForCausalLM

    import compressed_tensors_patch
    from compressed_tensors_patch import toy_moe

    logger.remove()
    root = Path(tempfile.mkdtemp(prefix="scalar-scales-bench-"))
    bf16 = toy_moe.build_toy_checkpoint(root / "bf16")

    model = AutoModelForCausalLM.from_pretrained(bf16, dtype=torch.bfloat16)
    oneshot(model=model, **toy_moe.oneshot_kwargs(args.scheme))
    prompt = torch.zeros((1, 4), dtype=torch.long)

    def timed_save(patched: bool, out: Path) -> float:
        patch = compressed_tensors_patch.applied() if patched else contextlib.nullcontext()
        with torch.no_grad():
            model(prompt)
        gc.collect()
        gc.disable()  # as timeit does: a full collection landing on one side is not the patch's cost
        try:
            with patch:
                start = time.perf_counter()
                model.save_pretrained(out, save_compressed=True)
                return time.perf_counter() - start
        finally:
            gc.enable()

    timed_save(False, root / "warmup-0")
    timed_save(True, root / "warmup-1")
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for round_ in range(args.rounds):
        order = (False, True) if round_ % 2 == 0 else (True, False)
        for patched in order:
            seconds[patched].append(timed_save(patched, root / f"r{round_}-{int(patched)}"))

    ratio = statistics.median(p / u for p, u in zip(seconds[True], seconds[False], strict=True))
    best_ratio = min(seconds[True]) / min(seconds[False])
    print(f"toy Qwen3-MoE, {args.scheme}, {args.rounds} rounds (alternating order)")
    for patched, label in ((False, "without patch"), (True, "with patch   ")):
        times = seconds[patched]
        print(f"save {label}: median {statistics.median(times) * 1e3:.1f} ms, best {min(times) * 1e3:.1f} ms")
    verdict = "MET" if ratio <= TARGET else "NOT MET"
    print(f"ratio, median of per-round ratios: {ratio:.3f}  target <= {TARGET}  {verdict}")
    print(f"ratio, best against best:          {best_ratio:.3f}")


if __name__ == "__main__":
    main()
