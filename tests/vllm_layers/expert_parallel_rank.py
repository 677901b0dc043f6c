"""One rank of an expert-parallel MoE layer: build it, load an artifact into it, say what each expert got.

    python expert_parallel_rank.py RANK WORLD PORT ARTIFACT LAYER PLUGIN OUT.json

Joins a gloo group of WORLD processes (tensor parallelism WORLD, expert
parallelism on), builds vLLM's real MoE layer LAYER of ARTIFACT (0.32:
RoutedExperts; 0.23: FusedMoE) with or without the plugin (PLUGIN 1 or 0),
loads every expert tensor of the layer through vLLM's own weight loader, and
writes: the global experts this rank owns, and for each global-scale tensor
of those experts the value its parameter holds; or the error loading raised.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(rank: int, world: int, port: int, artifact: Path, prefix: str, plugin: bool, out: Path) -> None:
    # as vLLM's CPU worker does: its shared-memory communicator (used where vllm._C is loaded) names its group so
    os.environ.setdefault("VLLM_DIST_IDENT", str(port))
    from scalar_scales_testkit import vllm_layers

    vllm_layers.select_cpu_platform()
    from vllm.config import ParallelConfig, VllmConfig, set_current_vllm_config

    import vllm_patch
    from scalar_scales.nvfp4 import is_global_scale

    if plugin:
        vllm_patch.apply()
    config = VllmConfig(parallel_config=ParallelConfig(tensor_parallel_size=world, enable_expert_parallel=True))
    with set_current_vllm_config(config):
        vllm_layers.init_distributed(world_size=world, rank=rank, port=port)
        layer = vllm_layers.build_moe_layer(artifact, prefix, config)
    expert_map = layer.expert_map.tolist()
    owned = [g for g, local in enumerate(expert_map) if local >= 0]
    result: dict[str, object] = {"owned": owned, "local_experts": layer.local_num_experts}
    weights = vllm_layers.expert_tensors(artifact, prefix)
    try:
        with set_current_vllm_config(config):
            vllm_layers.load_into_layer(layer, weights)
    except Exception as error:  # the test compares what each vLLM does without the plugin
        result["error"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    else:
        scales = {}
        for name, _ in weights:
            match = vllm_layers.EXPERT_TENSOR.match(name)
            if is_global_scale(name) and int(match["expert"]) in owned:
                scales[name] = vllm_layers.loaded_value(layer, name, local=expert_map[int(match["expert"])]).item()
        result["scales"] = scales
    out.write_text(json.dumps(result))


if __name__ == "__main__":
    rank, world, port, artifact, prefix, plugin, out = sys.argv[1:]
    main(int(rank), int(world), int(port), Path(artifact), prefix, plugin == "1", Path(out))
