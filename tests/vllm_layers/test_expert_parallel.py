"""Expert parallelism at the loader: two real ranks, each with vLLM's own MoE layer, load the global scales of
the experts they own (0.32 and 0.33: RoutedExperts; 0.23: FusedMoE).

Each rank is its own process (expert_parallel_rank.py), in one gloo group:
tensor parallelism 2 with expert parallelism on, as `vllm serve
--tensor-parallel-size 2 --enable-expert-parallel` would build the layer.
Engine-level runs: tests/engine/test_architectures.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scalar_scales.nvfp4 import is_global_scale
from scalar_scales_testkit.roundtrip import first_artifact, global_scales_on_disk
from scalar_scales_testkit.vllm_layers import EXPERT_TENSOR, free_port

RANK = Path(__file__).with_name("expert_parallel_rank.py")
WORLD = 2


def run_ranks(model: Path, layer: str, plugin: bool, tmp_path: Path) -> list[dict]:
    """Start every rank, wait for all (a rank left alone would wait for its peer forever), read what each saw."""
    port = free_port()
    outs = [tmp_path / f"rank{rank}.json" for rank in range(WORLD)]
    logs = [open(tmp_path / f"rank{rank}.log", "w") for rank in range(WORLD)]  # noqa: SIM115  # closed once all exit
    arguments = [str(WORLD), str(port), str(model), layer, "1" if plugin else "0"]
    ranks = [
        subprocess.Popen([sys.executable, RANK, str(rank), *arguments, str(outs[rank])], stdout=log, stderr=log)
        for rank, log in enumerate(logs)
    ]
    try:
        codes = [rank.wait(timeout=300) for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()
        for log in logs:
            log.close()
    assert codes == [0] * WORLD, [(tmp_path / f"rank{r}.log").read_text()[-2000:] for r in range(WORLD)]
    return [json.loads(out.read_text()) for out in outs]


@pytest.mark.parametrize("form", ["legacy", "format2"])
@pytest.mark.parametrize("plugin", [False, True], ids=["without-plugin", "with-plugin"])
def test_each_rank_holds_the_on_disk_global_scales_of_the_experts_it_owns(layer0, tmp_path, form, plugin):
    model = first_artifact("NVFP4", form)
    ranks = run_ranks(model, layer0, plugin, tmp_path)
    owned = [expert for rank in ranks for expert in rank["owned"]]
    experts = {int(EXPERT_TENSOR.match(name)["expert"]) for name in global_scales_on_disk(model) if layer0 in name}
    assert sorted(owned) == sorted(experts) and all(len(rank["owned"]) == len(experts) // WORLD for rank in ranks)
    for rank in ranks:
        assert "error" not in rank, rank.get("error")
        expected = {
            name: value.item()
            for name, value in global_scales_on_disk(model).items()
            if name.startswith(f"{layer0}.")
            and is_global_scale(name)
            and int(EXPERT_TENSOR.match(name)["expert"]) in rank["owned"]
        }
        assert rank["scales"] == expected
