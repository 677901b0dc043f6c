"""Load 66,048 per-tensor scales through a real vLLM MoE layer's weight_loader, with and without the plugin.

The DeepSeek-V4-Flash count: 43 layers x 256 experts x 3 projections x 2
global scales. A real layer with 256 experts and the compressed-tensors NVFP4
quant method is built on the CPU (the FP4 kernel choice is the plugin's emulation,
as in the tests), and each round loads its 1,536 global scales 43 times, as
shape-(1,) tensors the way llm-compressor writes them, through
``param.weight_loader``. Rounds alternate plugin on/off; the figure is the
median of per-round ratios.

Run it in the serving (vLLM 0.32) or legacy-vllm (vLLM 0.23) environment:

    OMP_NUM_THREADS=1 python benchmarks/loader_overhead.py --rounds 9

Target: ratio <= 1.03.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

from scalar_scales_testkit import vllm_layers

vllm_layers.select_cpu_platform()

import torch  # noqa: E402

import vllm_patch  # noqa: E402
from scalar_scales_testkit.synthetic import nvfp4_checkpoint_config  # noqa: E402

TARGET = 1.03
LAYERS, EXPERTS = 43, 256


def nvfp4_config_folder() -> Path:
    """A folder with just the ``config.json`` an NVFP4 artifact has: the layer needs no weights to be built."""
    folder = Path(tempfile.mkdtemp(prefix="scalar-scales-loader-bench-"))
    sizes = {"num_experts": EXPERTS, "hidden_size": 128, "moe_intermediate_size": 64}
    (folder / "config.json").write_text(json.dumps(nvfp4_checkpoint_config() | sizes))
    return folder


def calls(layer: torch.nn.Module) -> list[tuple]:
    """(param, loaded weight, weight name, shard, expert) for every global scale of one layer."""
    rows = []
    for expert in range(EXPERTS):
        for shard, param_stem in (("w1", "w13"), ("w3", "w13"), ("w2", "w2")):
            for kind in ("weight_global_scale", "input_global_scale"):
                param = getattr(layer, f"{param_stem}_{kind}")
                name = f"model.layers.0.mlp.experts.{param_stem}_{kind}"
                rows.append((param, torch.tensor([1000.0 + expert]), name, shard, expert))
    return rows


def load_all(rows: list[tuple]) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(LAYERS):
            for param, value, name, shard, expert in rows:
                param.weight_loader(param, value, name, shard_id=shard, expert_id=expert)
        return time.perf_counter() - start
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with vllm_layers.vllm_context():
        layer = vllm_layers.build_moe_layer(nvfp4_config_folder(), "model.layers.0.mlp.experts")
        rows = calls(layer)
        load_all(rows)
        seconds: dict[bool, list[float]] = {False: [], True: []}
        for round_ in range(args.rounds):
            for plugin in (False, True) if round_ % 2 == 0 else (True, False):
                vllm_patch.apply() if plugin else vllm_patch.revert()
                seconds[plugin].append(load_all(rows))
        vllm_patch.revert()

    import vllm

    ratio = statistics.median(p / u for p, u in zip(seconds[True], seconds[False], strict=True))
    scales = LAYERS * len(rows)
    print(
        f"vLLM {vllm.__version__} {type(layer).__name__}: {scales:,} per-tensor scales per round, {args.rounds} rounds"
    )
    for plugin, label in ((False, "without plugin"), (True, "with plugin   ")):
        print(f"{label}: median {statistics.median(seconds[plugin]):.3f} s")
    verdict = "MET" if ratio <= TARGET else "NOT MET"
    print(f"ratio (median of per-round ratios): {ratio:.3f}  target <= {TARGET}  {verdict}")


if __name__ == "__main__":
    main()
